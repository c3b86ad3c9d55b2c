"""The one version of the package: pyproject reads it, ``get_provider_info`` reports it, and the
package exports it as ``airflow_gpu_dag.__version__``. ``.devN`` while unreleased."""

__version__ = "0.2.0.dev0"
