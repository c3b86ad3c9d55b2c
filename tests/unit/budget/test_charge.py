"""Tests of ``airflow_gpu_dag.budget.charge``."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest import mock

import pytest
from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG
from kubernetes.client import models as k8s

from airflow_gpu_dag.authoring import budget_gate
from airflow_gpu_dag.budget import read_usage
from airflow_gpu_dag.budget.charge import SettleBudgetClaim
from airflow_gpu_dag.core.model.resources import GpuRequest
from airflow_gpu_dag.executor_config import gpu_hints
from airflow_gpu_dag.gpu.inventory import parse_inventory
from airflow_gpu_dag.gpu.lease import LeaseManager, LeaseOwner, LeaseSettings
from airflow_gpu_dag.gpu.usage import UsageLedger
from airflow_gpu_dag.operators.kubernetes import GpuKubernetesPodOperator
from tests.unit.operators.conftest import RUN_ID, _dag, build_pod, finished_pod, pod_dag


def _ctx(dag_id: str, run_id: str = "r1") -> dict[str, Any]:
    return {"dag": SimpleNamespace(dag_id=dag_id), "run_id": run_id, "ti": SimpleNamespace(map_index=-1)}


def _ti(dag_id: str, task_id: str, hours: float, try_number: int = 1) -> SimpleNamespace:
    return SimpleNamespace(
        dag_id=dag_id,
        run_id="r1",
        task_id=task_id,
        map_index=-1,
        try_number=try_number,
        start_date=datetime.now(UTC) - timedelta(hours=hours),
        state="failed",
    )


def _settle(task: Any, kind: str = "on_failure_callback") -> SettleBudgetClaim:
    (callback,) = [c for c in getattr(task, kind) if isinstance(c, SettleBudgetClaim)]
    return callback


@pytest.mark.usefixtures("_deferring", "_no_variables")
def test_a_gpu_operator_that_never_got_its_lease_is_charged_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_gpu_dag.operators.gpu import GpuBashOperator

    ledger = str(tmp_path / "usage.jsonl")
    monkeypatch.setenv("AIRFLOW__GPU_DAG__USAGE_LEDGER", ledger)  # where its leases are charged
    with DAG("d", schedule=None):
        fit = GpuBashOperator(task_id="fit", bash_command="true", gpus=4, duration="2h")
        gate = budget_gate(fit, gpu_hours_per_run=40)
        hints = gpu_hints(gpus=2, duration="1h")
        plain = EmptyOperator(task_id="plain", pool="gpu_a100", executor_config=hints)
        budget_gate(plain, gpu_hours_per_run=40)
    assert gate.execute(_ctx("d"))["allowed"]
    # the try waited an hour for its lease and timed out: it never held a GPU
    _settle(fit)({"ti": _ti("d", "fit", hours=1.0)})
    usage = read_usage(ledger, "d", "r1", None)
    assert (usage.run_gpu_seconds, usage.run_claimed_seconds) == (0, 0)  # before: 4 GPU-h
    # a task with neither a lease nor a pod is still charged GPUs x its run time
    _settle(plain)({"ti": _ti("d", "plain", hours=0.5)})
    assert read_usage(ledger, "d", "r1", None).run_gpu_hours == pytest.approx(1.0, abs=0.01)


@pytest.mark.usefixtures("_deferring", "_no_variables")
def test_a_lease_left_to_be_reclaimed_is_charged_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_gpu_dag.operators.gpu import GpuBashOperator

    ledger = tmp_path / "usage.jsonl"
    monkeypatch.setenv("AIRFLOW__GPU_DAG__LEASE_DIR", str(tmp_path / "leases"))
    monkeypatch.setenv("AIRFLOW__GPU_DAG__USAGE_LEDGER", str(ledger))
    with DAG("d", schedule=None):
        fit = GpuBashOperator(task_id="fit", bash_command="true", gpus=2, duration="1h")
        budget_gate(fit, gpu_hours_per_run=40, ledger=str(ledger))  # the same file, named
    manager = LeaseManager(LeaseSettings.from_config(), parse_inventory("2xa100:80GiB"))
    owner = LeaseOwner(dag_id="d", run_id="r1", task_id="fit", try_number=1, pool=fit.pool)
    lease = manager.acquire(GpuRequest(2), owner)
    time.sleep(0.05)
    # the command could not be stopped: the lease is left to be reclaimed, the task fails first
    _settle(fit)({"ti": _ti("d", "fit", hours=1.0)})
    lease.release("reclaimed")
    used = read_usage(str(ledger), "d", "r1", None).run_gpu_seconds
    assert 0 < used < 10  # the lease's seconds only; before: plus 2 GPUs x 1 h of run time


@pytest.mark.usefixtures("_deferring", "_no_variables")
def test_a_gpu_pod_that_never_started_is_charged_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_gpu_dag.operators.kubernetes import GpuKubernetesPodOperator

    ledger = str(tmp_path / "usage.jsonl")
    monkeypatch.setenv("AIRFLOW__GPU_DAG__USAGE_LEDGER", ledger)
    with DAG("pods", schedule=None):
        train = GpuKubernetesPodOperator(task_id="train", image="i", gpus=2, duration="1h")
        budget_gate(train, gpu_hours_per_run=40)
    _settle(train)({"ti": _ti("pods", "train", hours=0.5)})  # GpuPodNotScheduled after 30 min
    assert read_usage(ledger, "pods", "r1", None).run_gpu_seconds == 0  # before: 1 GPU-h


@pytest.mark.usefixtures("_deferring")
def test_gpu_pod_charges_the_budget_when_it_ends(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator

    from airflow_gpu_dag.operators.kubernetes import GpuKubernetesPodOperator

    ledger = tmp_path / "usage.jsonl"
    monkeypatch.setenv("AIRFLOW__GPU_DAG__USAGE_LEDGER", str(ledger))
    monkeypatch.setattr(KubernetesPodOperator, "cleanup", lambda self, *a, **k: None)
    with DAG("pods", schedule=None):
        op = GpuKubernetesPodOperator(task_id="train", image="i", gpus=2, gpu_type="a100")
    start = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
    ti = SimpleNamespace(dag_id="pods", run_id="r7", task_id="train", map_index=-1, try_number=1)
    pod = finished_pod(start, start + timedelta(hours=1))
    op.cleanup(pod, pod, context={"ti": ti})
    op.cleanup(pod, pod, context={"ti": ti})  # cleaned up twice: charged once
    records = UsageLedger(ledger).read()
    assert len(records) == 1 and records[0].gpu_seconds == 2 * 3600
    assert (records[0].dag_id, records[0].run_id, records[0].pool) == ("pods", "r7", "gpu_a100")
    assert read_usage(str(ledger), "pods", "r7", "gpu_a100", now=start.timestamp() + 7200).run_gpu_hours == 2


def test_a_killed_pod_is_charged_to_its_run_map_index_and_try() -> None:
    # on_kill charges the pod with the context's ids, not those of its labels, which the provider
    # sanitizes (run_id 'manual__2026-11-30T0000000000-<hash>') and which carry no try number: the GPU
    # time would go to a run that does not exist, as map index -1, and the run's budget never see it.
    with pod_dag("killed") as dag:
        op = GpuKubernetesPodOperator(task_id="train", image="i", namespace="ml", gpus=4)
    ti = SimpleNamespace(dag_id="killed", task_id="train", run_id=RUN_ID, map_index=3, try_number=2)
    context = {"ti": ti, "run_id": RUN_ID, "dag": dag}
    pod = build_pod(op, context)
    assert pod.metadata.labels["run_id"] != RUN_ID  # the sanitized label is not the run's id
    started = datetime(2026, 11, 30, tzinfo=UTC)
    running = k8s.V1Pod(
        metadata=pod.metadata,
        spec=pod.spec,
        status=k8s.V1PodStatus(
            phase="Running",
            container_statuses=[
                k8s.V1ContainerStatus(
                    name="base",
                    image="i",
                    image_id="",
                    ready=True,
                    restart_count=0,
                    state=k8s.V1ContainerState(running=k8s.V1ContainerStateRunning(started_at=started)),
                )
            ],
        ),
    )
    manager = mock.Mock()
    manager.read_pod.return_value = running
    op.__dict__["pod_manager"] = manager
    op.__dict__["client"] = mock.Mock()
    charged: list[Any] = []

    def provider_execute(self: Any, context: Any) -> None:
        self.pod = pod  # created; the kill arrives while the provider waits for it

    with (
        mock.patch("airflow_gpu_dag.budget.charge.charge", side_effect=lambda r: charged.append(r) or True),
        mock.patch.object(KubernetesPodOperator, "execute", provider_execute),
        mock.patch.object(KubernetesPodOperator, "on_kill"),
    ):
        op.execute(context)
        op.on_kill()
    assert len(charged) == 1
    record = charged[0]
    assert (record.dag_id, record.run_id, record.task_id) == ("killed", RUN_ID, "train")
    assert (record.map_index, record.try_number) == (3, 2)
    assert record.gpu_seconds > 0 and len(record.devices) == 4


def _pod_kubernetes_shared_args(phase: str, state: k8s.V1ContainerState | None = None) -> k8s.V1Pod:
    import datetime as dt

    start = dt.datetime(2026, 11, 30, tzinfo=dt.UTC)
    statuses = (
        [
            k8s.V1ContainerStatus(
                name="base", image="i", image_id="", ready=False, restart_count=0, state=state
            )
        ]
        if state
        else None
    )
    return k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(
            name="train-abc",
            namespace="ml",
            uid="u1",
            labels={"dag_id": "k8s_gpu", "run_id": "r", "task_id": "train"},
        ),
        spec=k8s.V1PodSpec(containers=[k8s.V1Container(name="base", image="i")], node_name="n1"),
        status=k8s.V1PodStatus(phase=phase, start_time=start, container_statuses=statuses),
    )


def test_a_pod_ended_by_timeout_or_kill_is_charged_from_its_current_status() -> None:
    # The pod the operator holds can be the snapshot taken at creation (Pending, no container status):
    # before, a task ended by execution_timeout or killed while its container ran was charged nothing.
    import datetime as dt
    from unittest import mock

    running = _pod_kubernetes_shared_args(
        "Running",
        k8s.V1ContainerState(
            running=k8s.V1ContainerStateRunning(started_at=dt.datetime(2026, 11, 30, tzinfo=dt.UTC))
        ),
    )
    dag = _dag()
    with dag:
        op = GpuKubernetesPodOperator(task_id="train", image="i", namespace="ml", gpus=8)
    manager = mock.Mock()
    manager.read_pod.return_value = running
    op.__dict__["pod_manager"] = manager
    op.__dict__["client"] = mock.Mock()
    charged: list[Any] = []
    from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator

    def record(usage: Any) -> bool:
        charged.append(usage)
        return True

    with (
        mock.patch("airflow_gpu_dag.budget.charge.charge", side_effect=record),
        mock.patch.object(KubernetesPodOperator, "cleanup"),  # the provider's part (raises: pod failed)
        mock.patch.object(KubernetesPodOperator, "on_kill"),
    ):
        op.cleanup(
            _pod_kubernetes_shared_args("Pending"),
            _pod_kubernetes_shared_args("Pending"),
            context={"ti": None},
        )  # an exception mid-run
        assert len(charged) == 1 and charged[0].gpu_seconds > 0 and len(charged[0].devices) == 8
        op.pod = _pod_kubernetes_shared_args("Pending")
        op.on_kill()  # killed: charged before the provider deletes the pod
    assert len(charged) == 2 and charged[1].task_id == "train" and charged[1].gpu_seconds > 0
    assert manager.read_pod.call_count == 2


# -- charge() and the settle callback on their own --------------------------------------------------------
def _record(lease_id: str | None = "l1", hours: float = 1.0, gpus: int = 2) -> Any:
    from airflow_gpu_dag.gpu.usage import UsageRecord

    end = datetime(2026, 11, 30, 12, tzinfo=UTC).timestamp()
    return UsageRecord("d", "r1", "fit", 1, tuple(range(gpus)), end - hours * 3600, end, lease_id=lease_id)


def _task_ti(**overrides: Any) -> SimpleNamespace:
    values: dict[str, Any] = {
        "dag_id": "d",
        "run_id": "r1",
        "task_id": "fit",
        "map_index": -1,
        "try_number": 1,
        "start_date": datetime.now(UTC) - timedelta(hours=1),
        "state": "success",
    }
    return SimpleNamespace(**{**values, **overrides})


@pytest.fixture
def _file_ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No shared ledger; the configured usage ledger is ``tmp_path/usage.jsonl`` (returned)."""
    monkeypatch.delenv("AIRFLOW__GPU_DAG__BUDGET_CONN_ID", raising=False)
    monkeypatch.setenv("AIRFLOW__GPU_DAG__USAGE_LEDGER", str(tmp_path / "usage.jsonl"))
    return tmp_path / "usage.jsonl"


@pytest.mark.usefixtures("_file_ledger")
def test_charge_records_in_the_named_ledger_once_per_lease(tmp_path: Path) -> None:
    from airflow_gpu_dag.budget.charge import charge

    named = tmp_path / "named.jsonl"
    assert charge(_record(), str(named)) and charge(_record(), str(named))  # charged twice: counted once
    assert [r.lease_id for r in UsageLedger(named).read()] == ["l1"]
    assert not (tmp_path / "usage.jsonl").exists()


def test_charge_without_a_ledger_uses_the_configured_one(_file_ledger: Path) -> None:
    from airflow_gpu_dag.budget.charge import charge

    assert charge(_record(lease_id=None, hours=0.5))
    (record,) = UsageLedger(_file_ledger).read()
    assert record.gpu_seconds == 3600.0


@pytest.mark.usefixtures("_file_ledger")
def test_charge_never_raises_when_the_ledger_cannot_be_written(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A ledger that cannot be written must not fail the GPU work that already ran."""
    from airflow_gpu_dag.budget.charge import charge

    (tmp_path / "a_file").write_text("not a folder")
    with caplog.at_level("ERROR", logger="airflow_gpu_dag.budget.charge"):
        assert charge(_record(), str(tmp_path / "a_file" / "usage.jsonl")) is False
    assert "could not charge 7200.0 GPU-s of d.fit" in caplog.text


@pytest.mark.usefixtures("_file_ledger")
def test_charge_to_a_unicode_ledger_path(tmp_path: Path) -> None:
    from airflow_gpu_dag.budget.charge import charge

    ledger = tmp_path / "données" / "budget·训练.jsonl"
    assert charge(_record(), str(ledger))
    assert read_usage(str(ledger), "d", "r1", None).run_gpu_hours == 2.0


@pytest.mark.usefixtures("_file_ledger")
def test_a_callback_with_no_task_instance_in_its_context_does_nothing(tmp_path: Path) -> None:
    SettleBudgetClaim(ledger=str(tmp_path / "u.jsonl"), gpus=2, pool="gpu")({"dag_run": object()})
    assert list(tmp_path.iterdir()) == []


@pytest.mark.usefixtures("_file_ledger")
def test_the_callback_reads_the_task_instance_under_either_context_key(tmp_path: Path) -> None:
    ledger = str(tmp_path / "u.jsonl")
    SettleBudgetClaim(ledger=ledger, gpus=2, pool="gpu")({"task_instance": _task_ti()})
    assert read_usage(ledger, "d", "r1", None).run_gpu_hours == pytest.approx(2.0, abs=0.01)


@pytest.mark.usefixtures("_file_ledger")
def test_the_charged_record_says_who_ran_where_and_how_it_ended(tmp_path: Path) -> None:
    ledger = tmp_path / "u.jsonl"
    settle = SettleBudgetClaim(ledger=str(ledger), gpus=3, pool="gpu_a100")
    settle({"ti": _task_ti(map_index=4, try_number=2, state=None)})
    (record,) = UsageLedger(ledger).read()
    assert (record.dag_id, record.run_id, record.task_id, record.map_index) == ("d", "r1", "fit", 4)
    assert (record.try_number, record.devices, record.pool) == (2, (0, 1, 2), "gpu_a100")
    assert record.outcome == "ended" and record.lease_id == "task:d|r1|fit|4|2" and record.host
    assert record.gpu_seconds == pytest.approx(3 * 3600, abs=30)
    assert repr(settle) == "SettleBudgetClaim(gpus=3, pool='gpu_a100', close=True)"


@pytest.mark.usefixtures("_file_ledger")
def test_a_map_index_that_is_not_a_number_is_read_as_an_unmapped_task(tmp_path: Path) -> None:
    from airflow_gpu_dag.budget.ledger import FileBudgetLedger
    from airflow_gpu_dag.core.model.budget import BudgetCap, BudgetClaim

    ledger = tmp_path / "u.jsonl"
    book = FileBudgetLedger(ledger)
    claim = BudgetClaim("d", "r1", "fit", 7200, None, "2026-11-30", 0, 4e9)
    assert book.claim(BudgetCap(gpu_hours_per_run=10), claim, 1).allowed
    SettleBudgetClaim(ledger=str(ledger), gpus=2, pool=None)({"ti": _task_ti(map_index=None)})
    assert book._claims(None) == {}  # the unmapped task's claim is closed
    assert UsageLedger(ledger).read()[0].map_index == -1


@pytest.mark.usefixtures("_file_ledger")
def test_a_try_that_did_not_start_or_started_in_the_future_is_charged_no_time(tmp_path: Path) -> None:
    ledger = tmp_path / "u.jsonl"
    SettleBudgetClaim(ledger=str(ledger), gpus=2, pool=None)({"ti": _task_ti(start_date=None)})
    future = datetime.now(UTC) + timedelta(hours=5)  # a clock ahead on another host
    SettleBudgetClaim(ledger=str(ledger), gpus=2, pool=None)(
        {"ti": _task_ti(try_number=2, start_date=future)}
    )
    assert [r.gpu_seconds for r in UsageLedger(ledger).read()] == [0.0, 0.0]


@pytest.mark.usefixtures("_file_ledger")
def test_a_task_without_gpus_is_charged_nothing_but_its_claim_is_closed(tmp_path: Path) -> None:
    from airflow_gpu_dag.budget.ledger import FileBudgetLedger
    from airflow_gpu_dag.core.model.budget import BudgetCap, BudgetClaim

    ledger = tmp_path / "u.jsonl"
    book = FileBudgetLedger(ledger)
    assert book.claim(BudgetCap(gpu_hours_per_run=10), BudgetClaim("d", "r1", "fit", 0, None, "x", 0, 4e9), 1)
    SettleBudgetClaim(ledger=str(ledger), gpus=0, pool=None)({"ti": _task_ti()})
    assert book._claims(None) == {} and UsageLedger(ledger).read() == []


@pytest.mark.usefixtures("_file_ledger")
def test_a_try_to_be_retried_is_charged_and_keeps_the_claim(tmp_path: Path) -> None:
    from airflow_gpu_dag.budget.ledger import FileBudgetLedger
    from airflow_gpu_dag.core.model.budget import BudgetCap, BudgetClaim

    ledger = tmp_path / "u.jsonl"
    book = FileBudgetLedger(ledger)
    claim = BudgetClaim("d", "r1", "fit", 7200, None, "x", 0, 4e9)
    assert book.claim(BudgetCap(gpu_hours_per_run=10), claim, 1).allowed
    keep = SettleBudgetClaim(ledger=str(ledger), gpus=2, pool=None, close=False)
    keep({"ti": _task_ti(state="up_for_retry")})
    keep({"ti": _task_ti(state="up_for_retry")})  # the callback run twice: the try charged once
    assert list(book._claims(None)) == [claim.claim_id]
    assert [r.outcome for r in UsageLedger(ledger).read()] == ["up_for_retry"]


def test_a_lease_task_on_the_configured_ledger_is_not_charged_its_run_time(_file_ledger: Path) -> None:
    for ledger in (None, str(_file_ledger)):
        SettleBudgetClaim(ledger=ledger, gpus=2, pool=None, charged_by="lease")({"ti": _task_ti()})
    assert UsageLedger(_file_ledger).read() == []  # its lease charges it there


def test_a_lease_task_gated_on_another_ledger_is_charged_its_run_time_there(
    _file_ledger: Path, tmp_path: Path
) -> None:
    """Its lease records go to the configured usage ledger, which the gate's own file never sees."""
    other = tmp_path / "team.jsonl"
    SettleBudgetClaim(ledger=str(other), gpus=2, pool=None, charged_by="lease")({"ti": _task_ti()})
    assert read_usage(str(other), "d", "r1", None).run_gpu_hours == pytest.approx(2.0, abs=0.01)


def test_a_pod_gated_on_the_local_file_while_pods_charge_a_shared_ledger_is_charged_its_run_time(
    _file_ledger: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__GPU_DAG__BUDGET_CONN_ID", "gpu_dag_budget")  # pods charge the database
    SettleBudgetClaim(ledger=str(_file_ledger), gpus=1, pool=None, charged_by="pod")({"ti": _task_ti()})
    assert read_usage(str(_file_ledger), "d", "r1", None).run_gpu_hours == pytest.approx(1.0, abs=0.01)


@pytest.mark.usefixtures("_file_ledger")
def test_the_callback_never_raises_when_the_ledger_cannot_be_written(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "a_file").write_text("not a folder")
    settle = SettleBudgetClaim(ledger=str(tmp_path / "a_file" / "u.jsonl"), gpus=2, pool=None)
    with caplog.at_level("ERROR", logger="airflow_gpu_dag.budget.charge"):
        settle({"ti": _task_ti()})
    assert "could not settle the claim of d.fit (it expires on its own)" in caplog.text


@pytest.mark.usefixtures("_file_ledger")
def test_a_ledger_template_is_rendered_with_the_dags_template_environment(tmp_path: Path) -> None:
    from airflow_gpu_dag.budget.charge import _rendered

    with DAG("team_a", schedule=None) as dag:
        task = EmptyOperator(task_id="fit")
    template = str(tmp_path / "{{ dag.dag_id }}" / "{% if run_id %}{{ run_id }}{% endif %}.jsonl")
    assert _rendered(template, {"dag": dag, "run_id": "r1"}) == str(tmp_path / "team_a" / "r1.jsonl")
    assert _rendered(template, {"task": task, "dag": dag, "run_id": "r1"}) == str(
        tmp_path / "team_a" / "r1.jsonl"
    )
    assert _rendered("/plain/u.jsonl", {}) == "/plain/u.jsonl"
    assert _rendered(None, {"dag": dag}) is None
