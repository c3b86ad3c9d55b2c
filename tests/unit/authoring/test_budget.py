"""Tests of ``airflow_gpu_dag.authoring.budget``."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG

from airflow_gpu_dag.authoring import budget_gate
from airflow_gpu_dag.budget.charge import SettleBudgetClaim
from airflow_gpu_dag.executor_config import gpu_hints


@pytest.mark.usefixtures("_deferring")
def test_budget_gate_wiring_and_default_pool() -> None:
    with DAG("bw", schedule=None) as dag:
        prep = EmptyOperator(task_id="prep")
        fit = EmptyOperator(task_id="fit", pool="gpu_a100")
        prep >> fit
        gate = budget_gate(fit, gpu_hours_per_pool_day=10)
    assert gate.task_id == "fit__budget" and gate.cap.pool == "gpu_a100"
    assert gate.pool == "default_pool"
    assert dag.get_task("prep").downstream_task_ids == {"fit__budget"}
    assert fit.upstream_task_ids == {"fit__budget"}
    assert dag.edge_info["fit__budget"]["fit"]["label"] == "budget"


@pytest.mark.usefixtures("_deferring")
def test_budget_gate_inside_a_task_group_is_named_once() -> None:
    from airflow.sdk import TaskGroup

    with DAG("bg", schedule=None) as dag, TaskGroup("pretrain"):
        fit = EmptyOperator(task_id="train", pool="gpu_a100")
        gate = budget_gate(fit, gpu_hours_per_pool_day=10)
    assert gate.task_id == "pretrain.train__budget"
    assert set(dag.task_dict) == {"pretrain.train", "pretrain.train__budget"}


@pytest.mark.usefixtures("_deferring", "_no_variables")
def test_a_mapped_task_cannot_be_gated(tmp_path: Path) -> None:
    from airflow_gpu_dag.operators.gpu import GpuBashOperator

    with DAG("mp", schedule=None):
        fit = GpuBashOperator.partial(task_id="fit", gpus=2, duration="1h").expand(bash_command=["a", "b"])
        with pytest.raises(
            ValueError, match="DAG 'mp', task 'fit': budget_gate\\(\\) cannot gate a mapped task"
        ):
            budget_gate(fit, gpu_hours_per_run=3, ledger=str(tmp_path / "usage.jsonl"))


@pytest.mark.usefixtures("_deferring", "_no_variables")
def test_a_pool_cap_on_another_pool_than_the_tasks_is_refused(tmp_path: Path) -> None:
    with DAG("pm", schedule=None):
        fit = EmptyOperator(task_id="fit", executor_config=gpu_hints(gpus=4, duration="1h"))
        with pytest.raises(
            ValueError, match=r"task runs in pool 'default_pool'.*Fix: set the task's pool='gpu_a100'"
        ):
            budget_gate(fit, gpu_hours_per_pool_day=6, pool="gpu_a100", ledger=str(tmp_path / "u.jsonl"))
        inside = EmptyOperator(
            task_id="inside", pool="gpu_a100", executor_config=gpu_hints(gpus=4, duration="1h")
        )
        gate = budget_gate(
            inside, gpu_hours_per_pool_day=6, pool="gpu_a100", ledger=str(tmp_path / "u.jsonl")
        )
    assert gate.cap.pool == "gpu_a100"


@pytest.mark.usefixtures("_no_variables")
@pytest.mark.parametrize("poke_interval", [0, -5, math.nan, math.inf, True])
def test_a_poke_interval_that_is_not_a_positive_number_is_refused(poke_interval: object) -> None:
    with DAG("d", schedule=None):
        fit = EmptyOperator(task_id="fit", pool="gpu_a100", executor_config=gpu_hints(gpus=1, duration="1h"))
        with pytest.raises(ValueError, match="DAG 'd', task 'fit__budget': poke_interval="):
            budget_gate(fit, gpu_hours_per_run=10, poke_interval=poke_interval)  # type: ignore[arg-type]


# -- what the gate claims, the callbacks it adds, and what it refuses -------------------------------------
def _gpu_task(task_id: str = "fit", **kwargs: object) -> EmptyOperator:
    kwargs.setdefault("pool", "gpu_a100")
    kwargs.setdefault("executor_config", gpu_hints(gpus=2, duration="1h"))
    return EmptyOperator(task_id=task_id, **kwargs)  # type: ignore[arg-type]


def test_a_task_in_no_dag_is_refused_naming_it_and_the_fix() -> None:
    with pytest.raises(ValueError, match=r"^task 'fit': add it to a DAG before calling budget_gate\(\)"):
        budget_gate(_gpu_task(), gpu_hours_per_run=10)


@pytest.mark.usefixtures("_no_variables")
def test_the_gate_claims_the_tasks_gpus_times_its_duration_estimate() -> None:
    with DAG("claims", schedule=None):
        gate = budget_gate(_gpu_task(), gpu_hours_per_run=10)
    assert (gate.gated_task_id, gate.claim_gpu_seconds) == ("fit", 2 * 3600)
    assert gate.cap.pool == "gpu_a100"  # a per-run cap's claim counts against the task's pool day too
    assert gate.execution_timeout is None and gate.pool == "default_pool" and "budget" in gate.doc_md


@pytest.mark.usefixtures("_no_variables")
def test_a_gpu_pool_task_that_declares_no_gpus_claims_its_pool_slots() -> None:
    with DAG("slots", schedule=None):
        fit = EmptyOperator(
            task_id="fit", pool="gpu_a100", pool_slots=3, executor_config=gpu_hints(duration="1h")
        )
        gate = budget_gate(fit, gpu_hours_per_run=10)
    assert gate.claim_gpu_seconds == 3 * 3600


@pytest.mark.usefixtures("_no_variables")
def test_a_task_outside_any_gpu_pool_that_declares_no_gpus_claims_nothing() -> None:
    with DAG("cpu", schedule=None):
        prep = EmptyOperator(task_id="prep", executor_config=gpu_hints(duration="1h"))
        gate = budget_gate(prep, gpu_hours_per_run=10)
    assert gate.claim_gpu_seconds == 0.0
    (settle,) = [c for c in prep.on_success_callback if isinstance(c, SettleBudgetClaim)]
    assert settle.gpus == 0  # nothing charged for it when it ends


@pytest.mark.usefixtures("_no_variables")
@pytest.mark.parametrize("duration", [None, "soon"], ids=["none", "unreadable"])
def test_a_task_without_a_readable_estimate_claims_the_default_one(
    duration: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__GPU_DAG__DEFAULT_DURATION", "2h")
    hints = gpu_hints(gpus=2) if duration is None else {"gpu_dag": {"gpus": 2, "duration_s": duration}}
    with DAG("default_estimate", schedule=None):
        gate = budget_gate(_gpu_task(executor_config=hints), gpu_hours_per_run=10)
    assert gate.claim_gpu_seconds == 2 * 2 * 3600


@pytest.mark.usefixtures("_no_variables")
def test_a_task_expected_to_use_more_than_the_pool_day_cap_is_refused_with_the_fix() -> None:
    with (
        DAG("big", schedule=None),
        pytest.raises(
            ValueError,
            match=r"^DAG 'big', task 'fit__budget': the gated task is expected to use 8 GPU-hours .* "
            r"gpu_hours_per_pool_day=6, so its gate could never pass\. Fix: raise the cap to at least 8",
        ),
    ):
        budget_gate(_gpu_task(executor_config=gpu_hints(gpus=4, duration="2h")), gpu_hours_per_pool_day=6)


@pytest.mark.usefixtures("_no_variables")
@pytest.mark.parametrize(
    ("caps", "message"),
    [
        ({"gpu_hours_per_run": "40"}, r"gpu_hours_per_run='40' is not a number of GPU-hours; pass e\.g\."),
        ({"gpu_hours_per_run": -1}, r"gpu_hours_per_run=-1 is negative; .* Fix: pass e\.g\."),
        ({"gpu_hours_per_pool_day": math.inf}, r"gpu_hours_per_pool_day=inf is not a number of GPU-hours"),
        ({"gpu_hours_per_run": 10**400}, r"gpu_hours_per_run=1000.* is not a number of GPU-hours"),
        ({}, r"a budget gate needs gpu_hours_per_run= or gpu_hours_per_pool_day="),
    ],
    ids=["string", "negative", "inf", "huge", "none"],
)
def test_a_cap_that_is_no_positive_number_is_refused_naming_the_gate(caps: dict, message: str) -> None:
    with (
        DAG("caps", schedule=None),
        pytest.raises(ValueError, match=r"^DAG 'caps', task 'fit__budget': " + message),
    ):
        budget_gate(_gpu_task(), **caps)


@pytest.mark.usefixtures("_no_variables")
def test_the_tasks_own_callbacks_stay_and_the_gate_settles_or_keeps_its_claim(tmp_path: Path) -> None:
    from airflow_gpu_dag.operators.gpu import GpuBashOperator

    def mine(context: object) -> None:
        return None

    ledger = str(tmp_path / "u.jsonl")
    with DAG("callbacks", schedule=None):
        plain = _gpu_task(on_success_callback=mine, on_retry_callback=[mine])
        budget_gate(plain, gpu_hours_per_run=10, ledger=ledger)
        leased = GpuBashOperator(task_id="leased", bash_command="true", gpus=1, duration="1h")
        budget_gate(leased, gpu_hours_per_run=10)
    assert plain.on_success_callback[0] is mine and plain.on_retry_callback[0] is mine
    settle, keep = plain.on_success_callback[1], plain.on_retry_callback[1]
    assert plain.on_failure_callback == [settle] and plain.on_skipped_callback == [settle]
    assert (settle.close, keep.close) == (True, False)
    assert (settle.ledger, settle.gpus, settle.pool, settle.charged_by) == (ledger, 2, "gpu_a100", None)
    (leased_settle,) = leased.on_success_callback
    assert leased_settle.charged_by == "lease"  # its lease charges it: not charged its run time again


@pytest.mark.usefixtures("_no_variables")
def test_a_decorated_task_is_gated_under_the_name_given() -> None:
    from airflow.sdk import task

    with DAG("decorated", schedule=None) as dag:

        @task(pool="gpu_a100", executor_config=gpu_hints(gpus=1, duration="30m"))
        def fit() -> None:
            pass

        gate = budget_gate(fit(), gpu_hours_per_run=10, task_id="fit_spend_check", poke_interval=120)
    assert gate.task_id == "fit_spend_check" and gate.poke_interval == 120
    assert dag.get_task("fit").upstream_task_ids == {"fit_spend_check"}
    assert gate.claim_gpu_seconds == 1800


@pytest.mark.usefixtures("_no_variables")
def test_a_refused_budget_gate_leaves_the_dag_as_it_was() -> None:
    with DAG("refused", schedule=None) as dag:
        fit = _gpu_task()
        with pytest.raises(ValueError, match="gpu_hours_per_run=0 is zero"):
            budget_gate(fit, gpu_hours_per_run=0)
        assert set(dag.task_dict) == {"fit"}  # docs/edges.md: checked "before the helper changes anything"
        budget_gate(fit, gpu_hours_per_run=10)  # the corrected call


@pytest.mark.usefixtures("_no_variables")
def test_a_teardown_cannot_be_gated_and_its_dag_is_left_as_it_was() -> None:
    with DAG("teardown", schedule=None) as dag:
        work = _gpu_task("work")
        clean = EmptyOperator(task_id="clean", pool="gpu_a100").as_teardown(setups=work)
        with pytest.raises(
            ValueError, match=r"DAG 'teardown', task 'clean' is a teardown.*Fix: put the gate"
        ):
            budget_gate(clean, gpu_hours_per_run=10)
    assert set(dag.task_dict) == {"work", "clean"}


@pytest.mark.usefixtures("_no_variables")
@pytest.mark.parametrize("gpus", [math.inf, -2], ids=["inf", "negative"])
def test_a_gpu_count_that_is_no_whole_number_of_gpus_is_refused_naming_the_task(gpus: float) -> None:
    with DAG("bad_gpus", schedule=None), pytest.raises(ValueError, match=r"^DAG 'bad_gpus', task 'fit.*gpus"):
        budget_gate(_gpu_task(executor_config=gpu_hints(gpus=gpus, duration="1h")), gpu_hours_per_run=10)


@pytest.mark.usefixtures("_no_variables")
def test_a_gpu_count_written_as_text_is_read_as_the_count() -> None:
    from airflow_gpu_dag.authoring.budget import expected_gpu_seconds

    with DAG("text_gpus", schedule=None):
        task = _gpu_task(executor_config={"gpu_dag": {"gpus": "2", "duration_s": 3600}})
    assert expected_gpu_seconds(task) == (2, 7200.0)
