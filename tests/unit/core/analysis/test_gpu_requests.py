"""Tests of ``airflow_gpu_dag.core.analysis.gpu_requests``."""

from __future__ import annotations

import pytest
from airflow.sdk import DAG

from airflow_gpu_dag.core import GpuRequest
from airflow_gpu_dag.core.analysis.gpu_requests import (
    InventorySummary,
    RequestLimits,
    check_gpu_request,
    default_pool_finding,
    device_could_hold,
)
from airflow_gpu_dag.core.model.findings import Finding
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


# -- direct checks of the pure function: order, boundaries, the words of each finding ------------------
def _found(
    gpu: GpuRequest | None, pool: str, limits: RequestLimits, slots: int | None = None
) -> list[tuple[str, str]]:
    count = slots if slots is not None else (gpu.count if gpu is not None else 1)
    return [(f.code, f.severity) for f in check_gpu_request("d", "t", gpu, pool, count, limits)]


def _one(gpu: GpuRequest | None, pool: str, limits: RequestLimits, slots: int | None = None) -> Finding:
    count = slots if slots is not None else (gpu.count if gpu is not None else 1)
    (finding,) = check_gpu_request("d", "t", gpu, pool, count, limits)
    return finding


A100_X4 = InventorySummary(
    (("a100", 81920), ("a100", 81920), ("a100", 40960), ("t4", 16384)), "static", "#0-3 a100, #4 t4"
)


def test_findings_come_in_the_documented_order() -> None:
    """Pool slots, spelling, pool/type contradiction, host size, unknown type: the docstring's order."""
    limits = RequestLimits(
        pool_slots={"gpu_h100": 4}, max_gpus_per_host=4, known_gpu_types=frozenset({"h100"})
    )
    found = _found(GpuRequest(8, gpu_type="a-100"), "gpu_h100", limits)
    assert found == [
        ("impossible-request", "error"),
        ("gpu-type-spelling", "warning"),
        ("pool-type-mismatch", "error"),
        ("impossible-request", "error"),
        ("unknown-gpu-type", "error"),
    ]


def test_a_pool_name_airflow_cannot_store_is_the_only_finding() -> None:
    """Nothing else is checked against a pool that cannot exist (every other finding would name it)."""
    pool = "gpu_" + "x" * 253  # 257 characters
    limits = RequestLimits(pool_slots={pool: 1}, max_gpus_per_host=1, known_gpu_types=frozenset())
    finding = _one(GpuRequest(8, gpu_type="a-100"), pool, limits)
    assert (finding.code, finding.severity) == ("bad-pool-name", "error")
    assert "257 characters" in finding.message and "256" in finding.message
    assert "shorter pool name" in finding.fix
    assert len(finding.message) < 200  # the name is shortened in the message


def test_a_pool_name_of_exactly_256_characters_is_accepted() -> None:
    pool = "gpu_" + "x" * 252
    assert _found(GpuRequest(1), pool, RequestLimits()) == []


def test_the_pool_name_limit_counts_characters_not_bytes() -> None:
    """Airflow's column is String(256): 256 characters of any script fit."""
    assert _found(None, "é" * 256, RequestLimits()) == []
    assert _found(None, "é" * 257, RequestLimits()) == [("bad-pool-name", "error")]


def test_more_gpus_than_the_pool_has_names_the_pool_and_the_fix_in_gpus() -> None:
    finding = _one(GpuRequest(16), "gpu_default", RequestLimits(pool_slots={"gpu_default": 8}))
    assert finding.code == "impossible-request" and finding.is_error
    assert finding.message.startswith("needs 16 GPUs but pool 'gpu_default' has only 8 in all")
    assert finding.fix == "request at most 8 GPUs, or grow pool 'gpu_default'."
    assert str(finding).startswith("ERROR [impossible-request] DAG 'd', task 't': needs 16 GPUs")


def test_slots_that_differ_from_the_gpu_count_are_called_slots() -> None:
    finding = _one(GpuRequest(2), "team", RequestLimits(pool_slots={"team": 3}), slots=4)
    assert "needs 4 slots but pool 'team' has only 3" in finding.message
    assert "request at most 3 slots" in finding.fix


def test_a_task_without_gpus_is_still_checked_against_its_pool_size() -> None:
    finding = _one(None, "cpu_pool", RequestLimits(pool_slots={"cpu_pool": 2}), slots=5)
    assert finding.code == "impossible-request" and "5 slots" in finding.message


@pytest.mark.parametrize(
    ("size", "slots", "expected"), [(4, 4, []), (4, 3, []), (4, 5, ["impossible-request"])]
)
def test_a_request_exactly_the_pool_size_fits(size: int, slots: int, expected: list[str]) -> None:
    limits = RequestLimits(pool_slots={"gpu_default": size})
    assert [code for code, _ in _found(GpuRequest(slots), "gpu_default", limits)] == expected


def test_a_pool_the_limits_do_not_list_is_not_checked() -> None:
    assert _found(GpuRequest(64), "gpu_other", RequestLimits(pool_slots={"gpu_default": 1})) == []


def test_a_pool_of_negative_slots_is_told_to_get_slots() -> None:
    finding = _one(GpuRequest(1), "gpu_x", RequestLimits(pool_slots={"gpu_x": -2}))
    assert "at most -2" not in finding.fix and "give pool 'gpu_x' slots" in finding.fix


def test_more_gpus_than_the_largest_host_names_the_option_and_the_fix() -> None:
    finding = _one(GpuRequest(9), "gpu_default", RequestLimits(max_gpus_per_host=8))
    assert finding.code == "impossible-request"
    assert "needs 9 GPUs but the largest host has 8 (gpu_dag.max_gpus_per_host)" in finding.message
    assert finding.fix == "request at most 8 GPUs or split the task."
    assert _found(GpuRequest(8), "gpu_default", RequestLimits(max_gpus_per_host=8)) == []


@pytest.mark.parametrize(
    ("memory_mib", "refused"), [(1024 * 1024, False), (1024 * 1024 + 1, True), (3 * 1024 * 1024, True)]
)
def test_the_plausible_memory_bound_is_one_tib_inclusive(memory_mib: int, refused: bool) -> None:
    found = _found(GpuRequest(1, memory_mib=memory_mib), "gpu_default", RequestLimits())
    assert (found == [("implausible-gpu-memory", "error")]) is refused
    assert refused or found == []


def test_implausible_memory_that_is_not_whole_tib_is_shown_in_a_unit_that_keeps_it_exact() -> None:
    finding = _one(GpuRequest(1, memory_mib=1024 * 1024 + 1), "gpu_default", RequestLimits())
    assert "asks for 1048577MiB per GPU" in finding.message


def test_implausible_memory_stops_the_type_and_inventory_checks() -> None:
    """One finding for one mistake: the type and device counts are not also reported against it."""
    limits = RequestLimits(inventory=A100_X4)
    found = _found(GpuRequest(8, memory_mib=8 * 1024**3, gpu_type="h100"), "gpu_h100", limits)
    assert found == [("implausible-gpu-memory", "error")]


def test_implausible_memory_names_the_largest_gpu_the_inventory_describes() -> None:
    big = InventorySummary((("future", 2 * 1024 * 1024),), "static", "#0 future 2048GiB")
    finding = _one(GpuRequest(1, memory_mib=3 * 1024 * 1024), "gpu_default", RequestLimits(inventory=big))
    assert finding.code == "implausible-gpu-memory"
    assert "more than 1TiB" not in finding.message  # the inventory has 2TiB GPUs: the bound is 2TiB
    assert "2TiB" in finding.message


def test_an_unknown_type_when_no_type_is_known_lists_none_and_offers_no_guess() -> None:
    finding = _one(GpuRequest(1, gpu_type="h100"), "gpu_h100", RequestLimits(known_gpu_types=frozenset()))
    assert finding.code == "unknown-gpu-type"
    assert "(known types: none)" in finding.message
    assert "did you mean" not in finding.fix and finding.fix.endswith("leave gpu_type unset for any GPU.")


def test_an_unknown_type_against_an_nvml_inventory_names_the_option_and_its_fix() -> None:
    nvml = InventorySummary((("t4", 16384),), "nvml", "#0 Tesla T4")
    finding = _one(GpuRequest(1, gpu_type="a100"), "gpu_a100", RequestLimits(inventory=nvml))
    assert "known types: t4; the GPUs of the host that parses DAG files" in finding.message
    assert "inventory_source = nvml" in finding.message
    assert "set [gpu_dag] inventory_source = auto" in finding.fix


def test_a_type_is_matched_to_the_inventory_whatever_its_case() -> None:
    assert _found(GpuRequest(2, gpu_type="A100"), "gpu_a100", RequestLimits(inventory=A100_X4)) == []


def test_more_gpus_of_a_type_than_the_inventory_has_names_how_many_fit() -> None:
    limits = RequestLimits(inventory=A100_X4)
    finding = _one(GpuRequest(3, memory_mib=80 * 1024, gpu_type="a100"), "gpu_a100", limits)
    assert finding.code == "impossible-request"
    assert (
        "needs 3x a100 (80GiB each) but the static inventory has only 2 GPU(s) with 80GiB" in finding.message
    )
    assert (
        "#0-3 a100, #4 t4" in finding.message
        and "the static inventory, [gpu_dag] inventory" in finding.message
    )
    assert finding.fix == (
        "request fewer GPUs or less memory, or correct [gpu_dag] inventory (it describes the workers' "
        "largest host)."
    )
    # without the memory, three A100s fit; without the type every device counts
    assert _found(GpuRequest(3, gpu_type="a100"), "gpu_a100", limits) == []
    assert _found(GpuRequest(4), "gpu_default", limits) == []
    assert _found(GpuRequest(5), "gpu_default", limits) == [("impossible-request", "error")]


def test_an_empty_inventory_fits_no_gpu() -> None:
    empty = InventorySummary((), "nvml", "no GPU")
    finding = _one(GpuRequest(1), "gpu_default", RequestLimits(inventory=empty))
    assert finding.code == "impossible-request" and "has only 0 GPU(s)" in finding.message


def test_a_type_of_the_inventory_contradicting_the_pool_is_an_error_even_when_the_type_exists() -> None:
    limits = RequestLimits(inventory=A100_X4)
    finding = _one(GpuRequest(1, gpu_type="a100"), "gpu_t4", limits)
    assert (finding.code, finding.severity) == ("pool-type-mismatch", "error")
    assert "pool 'gpu_t4' is the pool of GPU type 't4'" in finding.message


def test_a_respelled_type_in_the_pool_of_its_canonical_spelling_is_only_warned_about_the_spelling() -> None:
    assert _found(GpuRequest(1, gpu_type="RTX 4090"), "gpu_rtx_4090", RequestLimits()) == [
        ("gpu-type-spelling", "warning")
    ]


@pytest.mark.parametrize("pool", ["gpu_node1", "gpu_rack_a", "gpu_team"])
def test_a_pool_of_hosts_is_no_type_contradiction_whatever_the_inventory(pool: str) -> None:
    for limits in (RequestLimits(), RequestLimits(inventory=A100_X4)):
        assert _found(GpuRequest(1, gpu_type="a100"), pool, limits) == []


def test_a_pool_named_like_a_type_the_inventory_lacks_is_not_called_its_pool() -> None:
    """With an inventory, only its own types make a pool the pool of a type."""
    assert _found(GpuRequest(1, gpu_type="a100"), "gpu_h100", RequestLimits(inventory=A100_X4)) == []


def test_no_gpu_means_no_type_host_or_memory_checks() -> None:
    limits = RequestLimits(max_gpus_per_host=1, inventory=InventorySummary(()))
    assert _found(None, "gpu_h100", limits) == []


# -- the inventory as plain data -----------------------------------------------------------------------
def test_device_could_hold_compares_the_canonical_type_and_known_memory() -> None:
    assert device_could_hold("a100", 81920, 81920, "A100")
    assert not device_could_hold("a100", 81920, 81921, None)
    assert not device_could_hold("a100", None, None, "h100")
    assert device_could_hold("a100", None, 10**9, None)  # memory unknown: not checked
    assert device_could_hold("a100", 1024, 0, None)  # no memory asked
    assert device_could_hold("rtx_4090", 24576, None, "RTX 4090")
    assert not device_could_hold("rtx4090", 24576, None, "RTX 4090")  # another pool, another type


def test_an_inventory_summary_knows_its_types_and_largest_memory() -> None:
    assert A100_X4.types == frozenset({"a100", "t4"})
    assert A100_X4.largest_memory_mib == 81920
    assert InventorySummary((("a100", None),)).largest_memory_mib is None
    assert InventorySummary(()).largest_memory_mib is None and InventorySummary(()).types == frozenset()
    assert A100_X4.max_fitting() == 4
    assert A100_X4.max_fitting(40960, "a100") == 3
    assert A100_X4.max_fitting(16384) == 4


def test_the_inventory_types_win_over_the_known_types() -> None:
    limits = RequestLimits(inventory=A100_X4, known_gpu_types=frozenset({"h100"}))
    assert limits.gpu_types == frozenset({"a100", "t4"})
    assert RequestLimits(known_gpu_types=frozenset({"h100"})).gpu_types == frozenset({"h100"})
    assert RequestLimits().gpu_types is None


# -- default_pool ----------------------------------------------------------------------------------
def test_a_gpu_operator_in_default_pool_is_an_error_with_the_operator_fix() -> None:
    finding = default_pool_finding("d", "train", 4, operator=True)
    assert (finding.code, finding.severity) == ("gpu-in-default-pool", "error")
    assert "needs 4 GPU(s) but runs in Airflow's default_pool, which counts tasks" in finding.message
    assert finding.fix.startswith("drop pool=")
    assert str(finding).startswith("ERROR [gpu-in-default-pool] DAG 'd', task 'train':")


def test_a_task_with_gpu_hints_in_default_pool_is_warned_with_its_pool_slots() -> None:
    finding = default_pool_finding("d", None, 2)
    assert (finding.code, finding.severity) == ("gpu-in-default-pool", "warning")
    assert "pool_slots=2" in finding.fix and "pool='gpu_default'" in finding.fix
    assert str(finding).startswith("WARNING [gpu-in-default-pool] DAG 'd':")
