"""Adapters between Airflow objects (DAGs, serialized DAGs, task instances) and the pure core."""
