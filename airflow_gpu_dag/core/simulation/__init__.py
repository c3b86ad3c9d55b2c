"""The discrete-event simulator of DAG runs on GPU pools (``simulator``) and many runs of many DAGs
under stock Airflow and under the cross-DAG policy (``cross_dag``). Imports the groups below it."""
