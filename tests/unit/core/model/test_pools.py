"""Tests of ``airflow_gpu_dag.core.model.pools``."""

from __future__ import annotations

import pytest

from airflow_gpu_dag.core.model.pools import (
    DEFAULT_GPU_POOL,
    MAX_POOL_NAME_LENGTH,
    gpu_type_of_pool,
    is_gpu_pool,
    normalize_gpu_type,
    pool_for_gpu_type,
    pool_name_problem,
    pool_sizes_for_devices,
    respelled_gpu_type,
)


@pytest.fixture(autouse=True)
def _no_configured_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    for option in ("POOLS", "MAX_GPUS_PER_HOST", "INVENTORY", "INVENTORY_SOURCE"):
        monkeypatch.delenv(f"AIRFLOW__GPU_DAG__{option}", raising=False)


# -- pool names ----------------------------------------------------------------------------------
def test_our_pool_name_bound_is_airflows_column_length() -> None:
    from airflow.models.pool import Pool
    from airflow.models.taskinstance import TaskInstance

    assert Pool.__table__.c.pool.type.length == MAX_POOL_NAME_LENGTH
    assert TaskInstance.__table__.c.pool.type.length == MAX_POOL_NAME_LENGTH


def test_the_module_examples_hold() -> None:
    import doctest

    from airflow_gpu_dag.core.model import pools

    outcome = doctest.testmod(pools)
    assert outcome.attempted >= 3 and outcome.failed == 0


# -- GPU type spellings ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("written", "canonical"),
    [
        ("A100", "a100"),
        ("RTX 4090", "rtx_4090"),
        ("a-100", "a_100"),
        ("a 100", "a_100"),
        ("a_100", "a_100"),
        ("a -- 100", "a_100"),
        ("  __H100__  ", "h100"),
        ("L40S", "l40s"),
    ],
)
def test_a_gpu_type_is_lower_cased_and_every_run_of_separators_becomes_one_underscore(
    written: str, canonical: str
) -> None:
    assert normalize_gpu_type(written) == canonical


@pytest.mark.parametrize("written", ["", "   ", "!!!", "-_-", "\t\n"])
def test_a_gpu_type_without_letters_or_digits_is_refused_with_an_example(written: str) -> None:
    with pytest.raises(ValueError, match="no letters or digits") as caught:
        normalize_gpu_type(written)
    assert repr(written) in str(caught.value) and "'a100'" in str(caught.value)


@pytest.mark.parametrize(
    ("written", "odd", "fix"),
    [("ä100", "ä", "'a100'"), ("\uff21100", "\uff21", "'a100'"), ("rtx 4090é", "é", "'rtx_4090e'")],
)
def test_a_gpu_type_that_is_not_ascii_is_refused_with_its_ascii_spelling(
    written: str, odd: str, fix: str
) -> None:
    """ "ä100" would otherwise lose its letter and become pool ``gpu_100``."""
    with pytest.raises(ValueError, match="not ASCII") as caught:
        normalize_gpu_type(written)
    message = str(caught.value)
    assert repr(written) in message and repr(odd) in message
    assert f"Fix: write {fix}" in message


def test_a_gpu_type_with_nothing_ascii_to_keep_gets_a_generic_fix() -> None:
    with pytest.raises(ValueError, match="not ASCII") as caught:
        normalize_gpu_type("日本")
    assert "write it in ASCII letters and digits, e.g. 'a100'" in str(caught.value)


@pytest.mark.parametrize("written", ["ß100", "ø100"])
def test_the_ascii_fix_never_drops_the_letter_it_refused_the_type_for(written: str) -> None:
    """The refusal exists because the letter would be lost (pool ``gpu_100``); a fix that says
    ``write '100'`` leads the user into exactly that pool."""
    with pytest.raises(ValueError, match="not ASCII") as caught:
        normalize_gpu_type(written)
    assert "write '100'" not in str(caught.value)


@pytest.mark.parametrize(
    ("written", "respelled"),
    [
        ("a100", None),
        ("A100", None),
        ("rtx_4090", None),
        ("  a100  ", None),
        ("a-100", "a_100"),
        ("RTX 4090", "rtx_4090"),
        ("a__100", "a_100"),
        ("_a100_", "a100"),
        ("ä100", None),
        ("!!!", None),
    ],
)
def test_respelled_gpu_type_names_only_changes_beyond_case(written: str, respelled: str | None) -> None:
    assert respelled_gpu_type(written) == respelled


# -- pools of GPU types ----------------------------------------------------------------------------------
@pytest.mark.parametrize("gpu_type", [None, "", "   "])
def test_a_task_accepting_any_gpu_uses_the_default_gpu_pool(gpu_type: str | None) -> None:
    assert pool_for_gpu_type(gpu_type) == DEFAULT_GPU_POOL == "gpu_default"


def test_spellings_of_one_type_share_one_pool_and_the_pool_names_its_type() -> None:
    assert {pool_for_gpu_type(t) for t in ("A100", "a100", " a100 ")} == {"gpu_a100"}
    assert (
        pool_for_gpu_type("a-100") == pool_for_gpu_type("a 100") == "gpu_a_100" != pool_for_gpu_type("a100")
    )
    for gpu_type in ("a100", "rtx_4090", "h200"):
        assert gpu_type_of_pool(pool_for_gpu_type(gpu_type)) == gpu_type


def test_the_pool_of_a_non_ascii_gpu_type_is_refused_not_made_up() -> None:
    with pytest.raises(ValueError, match="Fix: write 'a100'"):
        pool_for_gpu_type("ä100")


@pytest.mark.parametrize(
    ("pool", "ours"),
    [
        ("gpu_default", True),
        ("gpu_a100", True),
        ("gpu_", False),
        ("GPU_A100", False),
        ("default_pool", False),
        ("", False),
        (None, False),
    ],
)
def test_is_gpu_pool_knows_the_pools_this_provider_names(pool: str | None, ours: bool) -> None:
    assert is_gpu_pool(pool) is ours


@pytest.mark.parametrize("pool", ["gpu_default", "gpu_", "default_pool", "cpu_pool", "GPU_a100"])
def test_a_pool_that_stands_for_no_gpu_type_has_none(pool: str) -> None:
    assert gpu_type_of_pool(pool) is None


def test_a_pool_name_up_to_airflows_limit_is_fine_and_a_longer_one_is_named_with_its_length() -> None:
    assert pool_name_problem("p" * MAX_POOL_NAME_LENGTH) is None
    problem = pool_name_problem("gpu_" + "x" * MAX_POOL_NAME_LENGTH)
    assert problem is not None
    assert (
        f"has {MAX_POOL_NAME_LENGTH + 4} characters" in problem
        and f"at most {MAX_POOL_NAME_LENGTH}" in problem
    )
    assert len(problem) < 200  # the name is shortened in the message, not repeated whole


def test_a_pool_name_is_measured_in_characters_not_bytes() -> None:
    """Airflow's ``String(256)`` column counts characters: 256 two-byte letters still fit."""
    assert pool_name_problem("ü" * MAX_POOL_NAME_LENGTH) is None
    assert pool_name_problem("ü" * (MAX_POOL_NAME_LENGTH + 1)) is not None


# -- pool sizes of a host --------------------------------------------------------------------------------
def test_a_host_without_devices_has_an_empty_default_gpu_pool() -> None:
    assert pool_sizes_for_devices([]) == {DEFAULT_GPU_POOL: 0}


def test_devices_of_one_type_spelled_two_ways_fill_one_pool() -> None:
    sizes = pool_sizes_for_devices(iter(["A100", "a100", "RTX 4090", "rtx_4090", "v100"]))
    assert sizes == {DEFAULT_GPU_POOL: 5, "gpu_a100": 2, "gpu_rtx_4090": 2, "gpu_v100": 1}


def test_every_device_counts_once_in_the_default_gpu_pool_whatever_its_type() -> None:
    """``gpu_default`` holds every device; a GPU type named ``default`` (a static inventory
    ``"2x default"``) maps to the same pool name and each device is added to it a second time."""
    sizes = pool_sizes_for_devices(["default", "default"])
    assert sizes[DEFAULT_GPU_POOL] == 2
