"""``airflow gpu-dag`` command line: lint, plan, simulate and the watermark controller.

Registered through ``get_provider_info()["cli"]`` ->
:func:`airflow_gpu_dag.cli.definition.get_gpu_dag_cli_commands`.
"""
