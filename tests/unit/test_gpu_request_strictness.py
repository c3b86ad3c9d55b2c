"""GPU declarations that were read silently in a way the author did not mean: refused with the fix, or
accepted with a warning that says how they were read (docs/gpu-tasks.md, "How a declaration is read").

- a memory per GPU larger than any GPU has (``"8000TiB"``) when no inventory says otherwise;
- GPU type spellings that collapse into one pool name (``"a-100"`` is ``gpu_a_100``, not ``gpu_a100``);
- a ``gpu_type`` that contradicts an explicit ``pool=``;
- a GPU task in Airflow's ``default_pool`` (a pool that counts tasks, not GPUs);
- pool names longer than Airflow's pool name column.
"""

from __future__ import annotations

import logging

import pytest
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG

from airflow_gpu_dag.airflow.policy import validate_dag
from airflow_gpu_dag.authoring import exclusive
from airflow_gpu_dag.core import GpuRequest, TaskGraph, TaskNode, ValidationPolicy, validate_graph
from airflow_gpu_dag.core.analysis.gpu_requests import InventorySummary, RequestLimits, check_gpu_request
from airflow_gpu_dag.core.model.pools import MAX_POOL_NAME_LENGTH
from airflow_gpu_dag.executor_config import gpu_hints
from airflow_gpu_dag.operators.gpu import GpuBashOperator
from airflow_gpu_dag.operators.gpu_spec import GpuTaskError


@pytest.fixture(autouse=True)
def _no_configured_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    for option in ("POOLS", "MAX_GPUS_PER_HOST", "INVENTORY", "INVENTORY_SOURCE"):
        monkeypatch.delenv(f"AIRFLOW__GPU_DAG__{option}", raising=False)


def _codes(gpu: GpuRequest, pool: str, limits: RequestLimits | None = None) -> dict[str, str]:
    found = check_gpu_request("d", "t", gpu, pool, gpu.count, limits or RequestLimits())
    return {f.code: f"{f.severity}: {f.message} Fix: {f.fix}" for f in found}


# -- memory ---------------------------------------------------------------------------------------
def test_more_memory_per_gpu_than_any_gpu_has_is_refused_without_an_inventory() -> None:
    found = _codes(GpuRequest.parse(1, "8000TiB"), "gpu_default")
    assert found["implausible-gpu-memory"].startswith("error:")
    assert "8000TiB" in found["implausible-gpu-memory"] and "1TiB" in found["implausible-gpu-memory"]
    assert "gpu_memory='80GiB'" in found["implausible-gpu-memory"]  # the fix
    with pytest.raises(GpuTaskError, match="8000TiB per GPU"), DAG("mem", schedule=None):  # imported before
        GpuBashOperator(task_id="t", bash_command="true", gpu_memory="8000TiB")


def test_a_gpu_of_an_inventory_may_have_more_than_the_plausible_bound() -> None:
    big = InventorySummary((("future", 2 * 1024 * 1024),), "static", "#0 future 2048GiB")
    assert _codes(GpuRequest.parse(1, "1.5TiB"), "gpu_default", RequestLimits(inventory=big)) == {}
    # an inventory whose GPUs have no known memory does not vouch for any size
    unknown = InventorySummary((("a100", None),), "static", "#0 a100")
    found = _codes(GpuRequest.parse(1, "8000TiB"), "gpu_default", RequestLimits(inventory=unknown))
    assert "implausible-gpu-memory" in found


# -- GPU type spellings ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("spelling", "read_as"), [("a-100", "a_100"), ("a 100", "a_100"), ("RTX 4090", "rtx_4090")]
)
def test_a_type_spelling_that_changes_its_pool_name_is_warned_with_how_it_was_read(
    spelling: str, read_as: str
) -> None:
    found = _codes(GpuRequest.parse(1, None, spelling), f"gpu_{read_as}")
    warning = found["gpu-type-spelling"]
    assert warning.startswith("warning:") and f"read as {read_as!r}" in warning
    assert f"gpu_{read_as}" in warning
    assert f"gpu_type={read_as!r}" in warning


@pytest.mark.parametrize("spelling", ["a100", "A100", "a_100", "rtx_4090"])
def test_a_canonical_type_spelling_is_not_warned(spelling: str) -> None:
    assert "gpu-type-spelling" not in _codes(GpuRequest.parse(1, None, spelling), "gpu_x")


def test_the_gpu_operator_logs_how_it_read_the_type(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING), DAG("spell", schedule=None):
        task = GpuBashOperator(task_id="t", bash_command="true", gpu_type="a-100")
    assert task.pool == "gpu_a_100"
    assert "'a-100' is read as 'a_100'" in caplog.text and "DAG 'spell'" in caplog.text


def test_an_unknown_type_that_differs_from_a_known_one_by_separators_gets_a_did_you_mean() -> None:
    limits = RequestLimits(known_gpu_types=frozenset({"a100"}))
    found = _codes(GpuRequest.parse(1, None, "a_100"), "gpu_a_100", limits)
    assert "did you mean 'a100'" in found["unknown-gpu-type"]


# -- gpu_type against an explicit pool -----------------------------------------------------------
def test_a_type_that_contradicts_the_pool_of_a_known_type_is_an_error() -> None:
    limits = RequestLimits(known_gpu_types=frozenset({"a100", "h100"}))
    error = _codes(GpuRequest.parse(1, None, "a100"), "gpu_h100", limits)["pool-type-mismatch"]
    assert error.startswith("error:") and "'gpu_h100'" in error and "'a100'" in error
    assert "pool='gpu_a100'" in error  # the fix


def test_a_type_against_a_pool_named_like_another_type_is_warned_when_no_type_is_known() -> None:
    warning = _codes(GpuRequest.parse(1, None, "a100"), "gpu_h100")["pool-type-mismatch"]
    assert warning.startswith("warning:")
    # a pool of hosts (exclusive(pool="gpu_node1")) and the type's own pools are fine
    assert "pool-type-mismatch" not in _codes(GpuRequest.parse(1, None, "a100"), "gpu_node1")
    assert "pool-type-mismatch" not in _codes(GpuRequest.parse(1, None, "a100"), "gpu_a100")
    assert "pool-type-mismatch" not in _codes(GpuRequest.parse(1, None, "a100"), "gpu_default")


def test_the_gpu_operator_refuses_a_type_that_contradicts_its_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__GPU_DAG__INVENTORY", "2xa100:80GiB,2xh100:80GiB")
    contradiction = r"DAG 'contra'.*pool 'gpu_h100' is the pool of GPU type 'h100'"
    with pytest.raises(GpuTaskError, match=contradiction), DAG("contra", schedule=None):
        GpuBashOperator(task_id="t", bash_command="true", gpu_type="a100", pool="gpu_h100")


# -- default_pool --------------------------------------------------------------------------------
def test_a_gpu_operator_in_default_pool_is_refused() -> None:
    with pytest.raises(GpuTaskError, match=r"'t' in DAG 'dp'.*default_pool") as err, DAG("dp", schedule=None):
        GpuBashOperator(task_id="t", bash_command="true", gpus=2, pool="default_pool")
    assert "drop pool=" in str(err.value)


def test_a_hinted_task_in_default_pool_is_warned_by_the_policy_and_lint() -> None:
    with DAG("dp_hint", schedule=None) as dag:
        EmptyOperator(task_id="t", executor_config=gpu_hints(duration="1h", gpus=2))
    (warning,) = [f for f in validate_dag(dag).findings if f.code == "gpu-in-default-pool"]
    assert not warning.is_error and "default_pool" in warning.message and "pool_slots=2" in warning.fix


# -- pool names ----------------------------------------------------------------------------------
def test_our_pool_name_bound_is_airflows_column_length() -> None:
    from airflow.models.pool import Pool
    from airflow.models.taskinstance import TaskInstance

    assert Pool.__table__.c.pool.type.length == MAX_POOL_NAME_LENGTH
    assert TaskInstance.__table__.c.pool.type.length == MAX_POOL_NAME_LENGTH


def test_a_pool_name_longer_than_airflow_stores_is_refused() -> None:
    long = "p" * (MAX_POOL_NAME_LENGTH + 1)
    graph = TaskGraph("long")
    graph.add_task(TaskNode("cpu", duration=900, pool=long))
    (error,) = [f for f in validate_graph(graph, ValidationPolicy()).findings if f.code == "bad-pool-name"]
    assert error.is_error and "257 characters" in error.message and "256" in error.message
    with pytest.raises(GpuTaskError, match="257 characters"), DAG("long_op", schedule=None):
        GpuBashOperator(task_id="t", bash_command="true", pool=long)
    too_long = "characters; Airflow stores at most 256"
    with pytest.raises(GpuTaskError, match=too_long), DAG("long_type", schedule=None):
        GpuBashOperator(task_id="t", bash_command="true", gpu_type="a" * 260)  # its pool: gpu_aaa...
    with DAG("long_excl", schedule=None):
        tasks = [EmptyOperator(task_id=f"t{i}") for i in range(2)]
    with pytest.raises(ValueError, match="257 characters"):
        exclusive(tasks, pool=long, pool_size=2)
