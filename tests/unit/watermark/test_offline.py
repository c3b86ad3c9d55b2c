"""The offline client of a dry run without a ``gpu_dag_api`` connection (watermark/offline.py): it reads
an empty Airflow and refuses every write, so a write in a dry run surfaces as a bug."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from airflow_gpu_dag.hooks.rest_client import AirflowRestClient
from airflow_gpu_dag.watermark.config import parse_config
from airflow_gpu_dag.watermark.controller import build_controller
from airflow_gpu_dag.watermark.offline import OfflineClient
from tests.unit.watermark.conftest import NOW, Source

#: Each read of the offline client, its arguments, and the empty answer it gives.
READS: list[tuple[str, tuple[Any, ...], Any]] = [
    ("get_pool", ("gpu",), None),
    ("task_instances", (["gpu"], ["scheduled", "queued", "running"]), []),
    ("run_task_instances", ("train", "manual__2026-11-30T00:00:00+00:00"), []),
    ("upstream_task_ids", ("train",), {}),
    ("dag_tasks", ("train",), []),
    ("task_history", ("train", "fit"), []),
    ("map_counts", ("train", "shard"), []),
    ("get_variable", ("gpu_dag_watermark_lease",), None),
]

#: Each write of the REST client with the arguments a caller would give it.
WRITES: list[tuple[str, tuple[Any, ...]]] = [
    ("set_pool", ("gpu", 4, "gpu-dag watermark")),
    ("set_task_instance_state", ("train", "r", "fit", -1, "failed", "too large")),
    ("create_variable", ("gpu_dag_watermark_lease", "me")),
    ("put_variable", ("gpu_dag_watermark_lease", "me")),
    ("request", ("GET", "/pools/gpu")),
]


@pytest.mark.parametrize(("method", "args", "empty"), READS, ids=[r[0] for r in READS])
def test_each_read_answers_as_an_empty_airflow(method: str, args: tuple[Any, ...], empty: Any) -> None:
    """No pool (None: it would be created), no task instance, no task, no history, no Variable."""
    answer = getattr(OfflineClient(), method)(*args)
    assert answer == empty and type(answer) is type(empty)


@pytest.mark.parametrize(("method", "args"), WRITES, ids=[w[0] for w in WRITES])
def test_each_write_raises_saying_a_dry_run_writes_nothing(method: str, args: tuple[Any, ...]) -> None:
    """A dry run writes nothing: a call that would write is a bug to surface, not to swallow."""
    with pytest.raises(RuntimeError, match=r"^an offline dry run writes nothing to Airflow$"):
        getattr(OfflineClient(), method)(*args)


@pytest.mark.parametrize("method", [r[0] for r in READS])
def test_each_read_takes_the_rest_clients_arguments(method: str) -> None:
    """A stand-in for the REST client: a read the controller makes is accepted with the same arguments
    and defaults (``task_history(dag_id, task_id, limit=40, states=("success",))``)."""
    offline = inspect.signature(getattr(OfflineClient, method)).parameters.values()
    real = inspect.signature(getattr(AirflowRestClient, method)).parameters.values()
    assert [(p.name, p.kind, p.default) for p in offline] == [(p.name, p.kind, p.default) for p in real]


def test_the_reason_is_what_the_dry_run_output_names() -> None:
    """``-o json`` and the table say where the output comes from: ``no Airflow connection ...: <reason>``."""
    assert OfflineClient.reason == "pools and queues not read"
    OfflineClient().close()  # nothing to close: the command closes any client it got


def test_a_dry_run_over_it_sizes_each_pool_at_its_capacity_and_writes_nothing() -> None:
    """Every pool reads as missing (it would be created), no task waits: the decided size is the
    capacity; a write would raise and show up as the pool's error."""
    config = parse_config(
        {
            "pools": {"gpu": {"source": 0, "backfill": False}, "a100": {"source": 0}},
            "lease": {"lock_file": None, "variable": None},
        }
    )
    sources = {"gpu": Source(4), "a100": Source(2)}
    ctl = build_controller(config, OfflineClient(), sources=sources, clock=lambda: NOW, dry_run=True)  # type: ignore[arg-type]
    report = ctl.preflight()
    assert (sorted(report.missing), report.created) == (["a100", "gpu"], [])
    outcomes = {o.pool: o for o in ctl.tick()}
    assert {p: (o.size, o.written, o.would_write, o.error) for p, o in outcomes.items()} == {
        "gpu": (4, False, True, None),
        "a100": (2, False, True, None),
    }
    assert ctl.release("finished --once") == []
