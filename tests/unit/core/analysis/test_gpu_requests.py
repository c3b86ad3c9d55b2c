"""Tests of ``airflow_gpu_dag.core.analysis.gpu_requests``."""

from __future__ import annotations

import pytest
from airflow.sdk import DAG

from airflow_gpu_dag.core import GpuRequest
from airflow_gpu_dag.core.analysis.gpu_requests import InventorySummary, RequestLimits, check_gpu_request
from airflow_gpu_dag.operators.gpu import GpuBashOperator
from airflow_gpu_dag.operators.gpu_spec import GpuTaskError


@pytest.fixture
def _no_configured_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    for option in ("POOLS", "MAX_GPUS_PER_HOST", "INVENTORY", "INVENTORY_SOURCE"):
        monkeypatch.delenv(f"AIRFLOW__GPU_DAG__{option}", raising=False)


def _codes(gpu: GpuRequest, pool: str, limits: RequestLimits | None = None) -> dict[str, str]:
    found = check_gpu_request("d", "t", gpu, pool, gpu.count, limits or RequestLimits())
    return {f.code: f"{f.severity}: {f.message} Fix: {f.fix}" for f in found}


# -- memory ---------------------------------------------------------------------------------------
@pytest.mark.usefixtures("_no_configured_limits")
def test_more_memory_per_gpu_than_any_gpu_has_is_refused_without_an_inventory() -> None:
    found = _codes(GpuRequest.parse(1, "8000TiB"), "gpu_default")
    assert found["implausible-gpu-memory"].startswith("error:")
    assert "8000TiB" in found["implausible-gpu-memory"] and "1TiB" in found["implausible-gpu-memory"]
    assert "gpu_memory='80GiB'" in found["implausible-gpu-memory"]  # the fix
    with pytest.raises(GpuTaskError, match="8000TiB per GPU"), DAG("mem", schedule=None):  # imported before
        GpuBashOperator(task_id="t", bash_command="true", gpu_memory="8000TiB")


@pytest.mark.usefixtures("_no_configured_limits")
def test_a_gpu_of_an_inventory_may_have_more_than_the_plausible_bound() -> None:
    big = InventorySummary((("future", 2 * 1024 * 1024),), "static", "#0 future 2048GiB")
    assert _codes(GpuRequest.parse(1, "1.5TiB"), "gpu_default", RequestLimits(inventory=big)) == {}
    # an inventory whose GPUs have no known memory does not vouch for any size
    unknown = InventorySummary((("a100", None),), "static", "#0 a100")
    found = _codes(GpuRequest.parse(1, "8000TiB"), "gpu_default", RequestLimits(inventory=unknown))
    assert "implausible-gpu-memory" in found


# -- GPU type spellings ---------------------------------------------------------------------------
@pytest.mark.usefixtures("_no_configured_limits")
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


@pytest.mark.usefixtures("_no_configured_limits")
@pytest.mark.parametrize("spelling", ["a100", "A100", "a_100", "rtx_4090"])
def test_a_canonical_type_spelling_is_not_warned(spelling: str) -> None:
    assert "gpu-type-spelling" not in _codes(GpuRequest.parse(1, None, spelling), "gpu_x")


@pytest.mark.usefixtures("_no_configured_limits")
def test_an_unknown_type_that_differs_from_a_known_one_by_separators_gets_a_did_you_mean() -> None:
    limits = RequestLimits(known_gpu_types=frozenset({"a100"}))
    found = _codes(GpuRequest.parse(1, None, "a_100"), "gpu_a_100", limits)
    assert "did you mean 'a100'" in found["unknown-gpu-type"]


# -- gpu_type against an explicit pool -----------------------------------------------------------
@pytest.mark.usefixtures("_no_configured_limits")
def test_a_type_that_contradicts_the_pool_of_a_known_type_is_an_error() -> None:
    limits = RequestLimits(known_gpu_types=frozenset({"a100", "h100"}))
    error = _codes(GpuRequest.parse(1, None, "a100"), "gpu_h100", limits)["pool-type-mismatch"]
    assert error.startswith("error:") and "'gpu_h100'" in error and "'a100'" in error
    assert "pool='gpu_a100'" in error  # the fix


@pytest.mark.usefixtures("_no_configured_limits")
def test_a_type_against_a_pool_named_like_another_type_is_warned_when_no_type_is_known() -> None:
    warning = _codes(GpuRequest.parse(1, None, "a100"), "gpu_h100")["pool-type-mismatch"]
    assert warning.startswith("warning:")
    # a pool of hosts (exclusive(pool="gpu_node1")) and the type's own pools are fine
    assert "pool-type-mismatch" not in _codes(GpuRequest.parse(1, None, "a100"), "gpu_node1")
    assert "pool-type-mismatch" not in _codes(GpuRequest.parse(1, None, "a100"), "gpu_a100")
    assert "pool-type-mismatch" not in _codes(GpuRequest.parse(1, None, "a100"), "gpu_default")


def test_a_request_for_a_pool_of_no_slots_is_not_told_to_request_zero_gpus() -> None:
    """``[gpu_dag] pools`` accepts 0 slots; before, the fix read 'request at most 0 GPUs'."""
    limits = RequestLimits(pool_slots={"gpu_h100": 0})
    (finding,) = check_gpu_request("d", "train", GpuRequest(1, gpu_type="h100"), "gpu_h100", 1, limits)
    assert "at most 0" not in finding.fix
    assert "gpu_h100" in finding.fix and "slots" in finding.fix
