"""The package is a real Airflow provider: entry points, provider info accepted by Airflow's own
ProvidersManager (which validates it against the provider schema), plugin registration."""

from __future__ import annotations

from importlib.metadata import distribution, entry_points

from airflow_gpu_dag.get_provider_info import get_provider_info


def test_entry_points_are_installed() -> None:
    providers = {e.value for e in entry_points(group="apache_airflow_provider")}
    assert "airflow_gpu_dag.get_provider_info:get_provider_info" in providers
    plugins = {e.value for e in entry_points(group="airflow.plugins")}
    assert "airflow_gpu_dag.plugins.plugin:GpuDagPlugin" in plugins
    policies = {e.value for e in entry_points(group="airflow.policy")}
    assert "airflow_gpu_dag.airflow.policy" in policies


def test_package_name_is_the_canonical_distribution_name() -> None:
    assert get_provider_info()["package-name"] == distribution("airflow-gpu-dag").metadata["Name"]


def test_airflow_providers_manager_accepts_it() -> None:
    from airflow.providers_manager import ProvidersManager

    manager = ProvidersManager()
    manager.initialize_providers_list()
    assert "airflow-gpu-dag" in manager.providers
    manager.initialize_providers_taskflow_decorator()
    assert "gpu" in manager.taskflow_decorators


def test_plugin_registers_the_priority_strategies() -> None:
    from airflow import plugins_manager

    strategies = plugins_manager.get_priority_weight_strategy_plugins()
    assert "airflow_gpu_dag.priority_strategy.CriticalPathPriorityStrategy" in strategies
    assert "airflow_gpu_dag.priority_strategy.PackingPriorityStrategy" in strategies
