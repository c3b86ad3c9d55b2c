"""GPU operators and ``@task.gpu``: declaration checks, pools, hints, serialization, leased execution."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pendulum
import pytest

from airflow_gpu_dag.core.model.resources import GpuRequest
from airflow_gpu_dag.decorators.gpu import gpu_task
from airflow_gpu_dag.executor_config import read_hints
from airflow_gpu_dag.gpu.lease import LeaseManager, LeaseSettings
from airflow_gpu_dag.gpu.usage import UsageLedger
from airflow_gpu_dag.operators.gpu import GpuBashOperator, GpuPythonOperator, GpuTaskError, resolve_gpu_task


@pytest.fixture(autouse=True)
def static_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A 4x A100 static inventory and a private lease directory for every test."""
    lease_dir = tmp_path / "leases"
    monkeypatch.setenv("AIRFLOW__GPU_DAG__INVENTORY_SOURCE", "static")
    monkeypatch.setenv("AIRFLOW__GPU_DAG__INVENTORY", "4xa100:80GiB")
    monkeypatch.setenv("AIRFLOW__GPU_DAG__LEASE_DIR", str(lease_dir))
    monkeypatch.setenv("AIRFLOW__GPU_DAG__LEASE_POLL_INTERVAL", "0.05")
    monkeypatch.delenv("AIRFLOW__GPU_DAG__POOLS", raising=False)
    monkeypatch.delenv("AIRFLOW__GPU_DAG__MAX_GPUS_PER_HOST", raising=False)
    return lease_dir


def make_dag(dag_id: str = "gpu_dag") -> Any:
    from airflow.sdk import DAG

    return DAG(dag_id, schedule=None, start_date=pendulum.datetime(2026, 1, 1))


# -- declaration --------------------------------------------------------------------------------------
def test_bash_operator_sets_pool_slots_and_hints() -> None:
    with make_dag():
        op = GpuBashOperator(
            task_id="train",
            bash_command="echo",
            gpus=2,
            gpu_memory="40GiB",
            gpu_type="A100",
            duration="1h30m",
            retries=3,
            inputs=["s3://data/clean"],
        )
    assert (op.pool, op.pool_slots, op.retries) == ("gpu_a100", 2, 3)
    assert read_hints(op.executor_config) == {
        "duration_s": 5400.0,
        "gpus": 2,
        "gpu_memory_mib": 40960,
        "gpu_type": "a100",
        "inputs": ["s3://data/clean"],
    }
    any_gpu = GpuBashOperator(task_id="eval", bash_command="echo")
    assert (any_gpu.pool, any_gpu.pool_slots) == ("gpu_default", 1)
    mine = GpuBashOperator(task_id="own", bash_command="echo", gpus=2, pool="team_gpus")
    assert (mine.pool, mine.pool_slots) == ("team_gpus", 2)


def test_existing_executor_config_is_kept() -> None:
    op = GpuBashOperator(task_id="t", bash_command="echo", gpus=1, executor_config={"pod_override": {"x": 1}})
    assert (op.executor_config or {})["pod_override"] == {"x": 1}
    assert read_hints(op.executor_config)["gpus"] == 1


@pytest.mark.parametrize(
    ("kwargs", "fragments"),
    [
        ({"gpus": 0}, ["'train'", "at least 1", "Fix:"]),
        ({"gpus": -2}, ["'train'", "at least 1"]),
        ({"gpus": 1.5}, ["'train'", "whole number"]),
        ({"gpus": 8}, ["'train'", "only 4", "Fix:"]),
        ({"gpu_memory": "eighty"}, ["'train'", "'eighty'", "80GiB"]),
        ({"gpu_memory": "120GiB"}, ["'train'", "120GiB", "Fix:"]),
        ({"gpu_type": "h100"}, ["'train'", "'h100'", "known types: a100"]),
        ({"duration": "soon"}, ["'train'", "duration", "1h30m"]),
        ({"gpus": 2, "pool_slots": 1}, ["'train'", "pool_slots=1", "drop pool_slots"]),
    ],
)
def test_bad_declaration_fails_at_parse_time(kwargs: dict[str, Any], fragments: list[str]) -> None:
    with pytest.raises(GpuTaskError) as err, make_dag("bad_dag"):
        GpuBashOperator(task_id="train", bash_command="echo", **kwargs)
    for fragment in fragments:
        assert fragment in str(err.value)
    assert "'bad_dag'" in str(err.value)


def test_80g_and_80gib_both_fit_an_80gib_gpu() -> None:
    assert GpuBashOperator(task_id="a", bash_command="echo", gpu_memory="80G").gpu_request.memory_mib == 76294
    assert (
        GpuBashOperator(task_id="b", bash_command="echo", gpu_memory="80GiB").gpu_request.memory_mib == 81920
    )


def test_configured_host_and_pool_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__GPU_DAG__MAX_GPUS_PER_HOST", "2")
    with pytest.raises(GpuTaskError, match="largest host has 2"):
        GpuBashOperator(task_id="t", bash_command="echo", gpus=3)
    monkeypatch.delenv("AIRFLOW__GPU_DAG__MAX_GPUS_PER_HOST")
    monkeypatch.setenv("AIRFLOW__GPU_DAG__POOLS", '{"gpu_default": 3}')
    with pytest.raises(GpuTaskError, match="pool 'gpu_default' has only 3"):
        GpuBashOperator(task_id="t", bash_command="echo", gpus=4)


def test_without_any_inventory_only_configured_limits_are_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__GPU_DAG__INVENTORY", "")
    spec = resolve_gpu_task("t", gpus=16, gpu_type="b200")  # nothing known to compare against
    assert (spec.pool, spec.pool_slots) == ("gpu_b200", 16)


# -- decorator ------------------------------------------------------------------------------------------
def test_task_gpu_is_registered_with_the_task_sdk() -> None:
    from airflow.sdk import task
    from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime

    assert ProvidersManagerTaskRuntime().taskflow_decorators["gpu"] is gpu_task
    assert task.gpu is gpu_task


def test_decorator_builds_a_gpu_task() -> None:
    from airflow.sdk import task

    with make_dag() as dag:

        @task.gpu(gpus=2, gpu_memory="40GiB", duration="45m", retries=2)
        def train(gpu_lease: dict | None = None) -> str:
            return os.environ["CUDA_VISIBLE_DEVICES"]

        @task.gpu
        def evaluate() -> None:
            pass

        train() >> evaluate()
    op = dag.get_task("train")
    assert isinstance(op, GpuPythonOperator)
    assert (op.pool, op.pool_slots, op.retries) == ("gpu_default", 2, 2)
    assert read_hints(op.executor_config) == {"duration_s": 2700.0, "gpus": 2, "gpu_memory_mib": 40960}
    assert (dag.get_task("evaluate").pool_slots, dag.get_task("evaluate").pool) == (1, "gpu_default")


def test_decorator_rejects_bad_input_when_applied() -> None:
    from airflow.sdk import task

    with pytest.raises(GpuTaskError, match=r"'train'.*at least 1"):

        @task.gpu(gpus=0)
        def train() -> None:
            pass

    with pytest.raises(GpuTaskError, match="'h100' is not in the inventory"):

        @task.gpu(gpu_type="h100")
        def evaluate() -> None:
            pass


def test_decorator_refuses_unknown_keywords_even_on_a_task_that_is_only_mapped() -> None:
    """Stock Airflow passes an unknown keyword of a mapped decorated task through silently:
    ``@task.gpu(gpu=4)`` (for ``gpus``) ran on one GPU. Now the decorator names the DAG, the task and
    the keyword it meant."""
    from airflow.sdk import task

    with make_dag(), pytest.raises(GpuTaskError) as err:

        @task.gpu(gpu=4, duraton="2h")
        def sweep(lr: float) -> float:
            return lr

        sweep.expand(lr=[1e-4, 3e-5])
    message = str(err.value)
    assert "'sweep' in DAG" in message and "'gpus' instead of 'gpu'" in message
    assert "'duration' instead of 'duraton'" in message
    with pytest.raises(GpuTaskError, match=r"map_length goes in executor_config=gpu_hints\(map_length=N\)"):

        @task.gpu(gpus=1, map_length=3)
        def trial(x: int) -> int:
            return x

    with make_dag() as dag:  # every operator keyword still passes

        @task.gpu(gpus=2, retries=2, queue="gpu", pool_slots=2, templates_dict={}, multiple_outputs=False)
        def fine() -> None:
            pass

        fine()
    assert dag.get_task("fine").retries == 2


def test_override_recomputes_pool_and_slots() -> None:
    from airflow.sdk import task

    with make_dag() as dag:

        @task.gpu(gpus=1)
        def step() -> None:
            pass

        step.override(task_id="wide", gpus=4, gpu_type="a100")()
    wide = dag.get_task("wide")
    assert (wide.pool, wide.pool_slots, read_hints(wide.executor_config)["gpus"]) == ("gpu_a100", 4, 4)


def test_mapped_tasks_carry_pool_slots_and_hints() -> None:
    from airflow.sdk import task

    with make_dag() as dag:

        @task.gpu(gpus=2)
        def sweep(lr: float) -> float:
            return lr

        sweep.expand(lr=[0.1, 0.01])
        GpuBashOperator.partial(task_id="bash_sweep", gpus=3).expand(bash_command=["echo 1", "echo 2"])
    mapped = dag.get_task("sweep")
    assert (mapped.pool, mapped.pool_slots) == ("gpu_default", 2)
    assert read_hints(mapped.partial_kwargs["executor_config"])["gpus"] == 2
    bash = dag.get_task("bash_sweep")
    assert (bash.pool, bash.pool_slots) == ("gpu_default", 3)


def test_override_of_a_mapped_task_derives_pool_slots_and_hints_again() -> None:
    # No operator is built at parse time for a mapped task: before, .override(gpus=4) left the pool
    # at 2 slots and the hints at 2 GPUs while the worker leased 4, and a typo passed parse time.
    from airflow.sdk import task

    with make_dag() as dag:

        @task.gpu(gpus=2, duration="1h")
        def train(lr: float) -> float:
            return lr

        train.override(task_id="wide", gpus=4, gpu_type="a100", duration="3h").expand(lr=[0.1, 0.01])
        with pytest.raises(GpuTaskError, match="does not take 'gpu'"):
            train.override(task_id="typo", gpu=4).expand(lr=[0.1])
        train.expand(lr=[0.1])  # the decorator itself is unchanged
    wide = dag.get_task("wide")
    hints = read_hints(wide.partial_kwargs["executor_config"])
    assert (wide.pool, wide.pool_slots, hints["gpus"], hints["duration_s"]) == ("gpu_a100", 4, 4, 10800.0)
    plain = dag.get_task("train")
    assert (plain.pool, plain.pool_slots) == ("gpu_default", 2)


def test_hints_pool_and_slots_survive_serialization() -> None:
    from airflow.serialization.serialized_objects import DagSerialization

    with make_dag("ser") as dag:
        GpuBashOperator(task_id="train", bash_command="echo", gpus=3, gpu_type="a100", duration="2h")
    restored = DagSerialization.from_dict(DagSerialization.to_dict(dag))
    task = restored.get_task("train")
    assert (task.pool, task.pool_slots) == ("gpu_a100", 3)
    assert read_hints(task.executor_config) == {"duration_s": 7200.0, "gpus": 3, "gpu_type": "a100"}


# -- execution --------------------------------------------------------------------------------------------
def context(task_id: str) -> dict[str, Any]:
    ti = SimpleNamespace(dag_id="gpu_dag", run_id="run1", task_id=task_id, map_index=-1, try_number=1)
    return {"ti": ti, "task_instance": ti}


def test_bash_command_sees_exactly_its_gpus(static_host: Path) -> None:
    manager = LeaseManager(LeaseSettings.from_config())
    other = manager.acquire(GpuRequest(1))
    op = GpuBashOperator(
        task_id="train", bash_command='echo "$CUDA_VISIBLE_DEVICES|$NVIDIA_VISIBLE_DEVICES"', gpus=2
    )
    output = op.execute(context("train"))
    visible, nvidia = output.split("|")
    assert visible == nvidia
    devices = [int(d) for d in visible.split(",")]
    assert len(devices) == 2 and other.devices[0] not in devices
    (record,) = UsageLedger(static_host / "usage.jsonl").read()
    assert (record.task_id, record.devices, record.outcome, record.pool) == (
        "train",
        tuple(devices),
        "success",
        "gpu_default",
    )
    assert [r["lease_id"] for r in manager.leases()] == [other.lease_id]


def test_failed_command_releases_its_lease(static_host: Path) -> None:
    from airflow.sdk.exceptions import AirflowException

    op = GpuBashOperator(task_id="crash", bash_command="exit 3", gpus=4)
    with pytest.raises(AirflowException, match="non-zero exit code 3"):
        op.execute(context("crash"))
    assert LeaseManager(LeaseSettings.from_config()).leases() == []
    assert [r.outcome for r in UsageLedger(static_host / "usage.jsonl").read()] == ["failed"]


def test_on_kill_stops_the_command_and_releases(static_host: Path) -> None:
    op = GpuBashOperator(task_id="long", bash_command="sleep 60", gpus=4)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            op.execute(context("long"))
        except BaseException as err:
            errors.append(err)

    thread = threading.Thread(target=run)
    thread.start()
    manager = LeaseManager(LeaseSettings.from_config())
    deadline = pendulum.now().add(seconds=30)
    while pendulum.now() < deadline and not (
        manager.leases() and manager.leases()[0]["processes"]
    ):  # the command is running and recorded in the lease
        thread.join(0.05)
    op.on_kill()
    thread.join(30)
    assert not thread.is_alive() and errors
    assert manager.leases() == []
    assert [r.outcome for r in UsageLedger(static_host / "usage.jsonl").read()] == ["killed"]


def test_execution_timeout_gives_the_gpus_back_only_once_the_command_is_gone(
    static_host: Path, tmp_path: Path
) -> None:
    # Airflow raises AirflowTaskTimeout inside execute() and calls on_kill() only after it: before,
    # execute's cleanup released the lease while a command that ignores SIGTERM still ran, and the
    # next task was given GPUs it was using.
    import datetime

    from airflow.sdk.exceptions import AirflowTaskTimeout
    from airflow.sdk.execution_time.task_runner import _run_execute_callable

    pid_file = tmp_path / "cmd.pid"
    op = GpuBashOperator(
        task_id="stuck",
        gpus=4,
        execution_timeout=datetime.timedelta(seconds=1),
        bash_command=f"trap '' TERM; echo $$ > {pid_file}; sleep 60",
    )
    op.command_stop_grace_s = 0.5
    released_while_running: list[bool] = []
    finish = op._finish_gpu_lease

    def spy(outcome: str) -> None:
        pid = int(pid_file.read_text())
        released_while_running.append(Path(f"/proc/{pid}").exists())
        finish(outcome)

    op._finish_gpu_lease = spy  # type: ignore[method-assign]
    ctx = context("stuck")
    with pytest.raises(AirflowTaskTimeout):
        _run_execute_callable(ctx, op.execute, op)  # type: ignore[arg-type]
    pid = int(pid_file.read_text())
    try:
        assert released_while_running and not any(released_while_running)
        assert not Path(f"/proc/{pid}").exists()
        assert LeaseManager(LeaseSettings.from_config()).leases() == []
    finally:
        with __import__("contextlib").suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)


def test_python_callable_gets_lease_env_and_context(static_host: Path) -> None:
    seen: dict[str, Any] = {}

    def train(gpu_lease: dict | None = None) -> str:
        seen["lease"] = gpu_lease
        return os.environ["CUDA_VISIBLE_DEVICES"]

    before = os.environ.get("CUDA_VISIBLE_DEVICES")
    op = GpuPythonOperator(task_id="py", python_callable=train, gpus=3)
    result = op.execute(context("py"))
    assert (
        sorted(int(d) for d in result.split(",")) == seen["lease"]["devices"]
        and len(seen["lease"]["devices"]) == 3
    )
    assert os.environ.get("CUDA_VISIBLE_DEVICES") == before  # restored afterwards
    assert [r.outcome for r in UsageLedger(static_host / "usage.jsonl").read()] == ["success"]


def test_lease_wait_times_out_with_a_clear_error(static_host: Path) -> None:
    from airflow.sdk.exceptions import AirflowException

    LeaseManager(LeaseSettings.from_config()).acquire(GpuRequest(4))
    op = GpuBashOperator(task_id="late", bash_command="echo", gpus=1, lease_timeout="0.3s")
    with pytest.raises(AirflowException, match=r"gpu_dag\.late .*waited 0s.*Fix:"):
        op.execute(context("late"))


def _forget_lease(lease_dir: Path) -> None:
    """Remove every lease from the table, as a reclaim by another worker would."""
    import json

    table_path = lease_dir / "leases.json"
    table = json.loads(table_path.read_text())
    table["leases"] = {}
    table_path.write_text(json.dumps(table))


@pytest.mark.parametrize(
    "handler",
    [signal.default_int_handler, signal.SIG_DFL, signal.SIG_IGN],
    ids=["python_default", "sig_dfl", "sig_ign"],
)
def test_python_task_that_loses_its_lease_fails(
    static_host: Path, monkeypatch: pytest.MonkeyPatch, handler: Any
) -> None:
    """The lost lease interrupts the callable whatever SIGINT's handler is: Airflow's task process
    sets it to SIG_DFL (supervisor ``_reset_signals``), where ``_thread.interrupt_main`` alone does
    nothing. The process's handler is given back afterwards."""
    from airflow_gpu_dag.gpu.lease import LeaseLost

    monkeypatch.setenv("AIRFLOW__GPU_DAG__LEASE_TTL", "2s")
    monkeypatch.setenv("AIRFLOW__GPU_DAG__LEASE_HEARTBEAT", "0.1s")
    ran_to_the_end: list[bool] = []

    def train() -> None:
        _forget_lease(static_host)
        for _ in range(300):  # would run 30 s; the lost lease interrupts it
            time.sleep(0.1)
        ran_to_the_end.append(True)

    previous = signal.signal(signal.SIGINT, handler)
    try:
        op = GpuPythonOperator(task_id="victim", python_callable=train, gpus=1)
        with pytest.raises(LeaseLost, match="reclaimed while the task ran"):
            op.execute(context("victim"))
        assert signal.getsignal(signal.SIGINT) == handler
    finally:
        signal.signal(signal.SIGINT, previous)
    assert not ran_to_the_end, "the callable kept running on GPUs it no longer held"


def test_bash_task_that_loses_its_lease_is_stopped(
    static_host: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_gpu_dag.gpu.lease import LeaseLost

    monkeypatch.setenv("AIRFLOW__GPU_DAG__LEASE_TTL", "2s")
    monkeypatch.setenv("AIRFLOW__GPU_DAG__LEASE_HEARTBEAT", "0.1s")
    op = GpuBashOperator(task_id="victim", bash_command="sleep 30", gpus=1)
    stop = threading.Event()

    def forget_once_leased() -> None:  # not on a timer: on a loaded machine the lease may come late
        table = static_host / "leases.json"
        while not stop.is_set():
            if table.exists() and '"devices"' in table.read_text():
                time.sleep(0.5)  # the command has started
                _forget_lease(static_host)
                return
            time.sleep(0.05)

    thread = threading.Thread(target=forget_once_leased, daemon=True)
    thread.start()
    try:
        with pytest.raises(LeaseLost, match="its GPU work was stopped"):
            op.execute(context("victim"))
    finally:
        stop.set()
        thread.join(5)


def _lost_once_leased(op: Any, *, after_get_env: bool = False) -> None:
    """The heartbeat finds the lease reclaimed (state ``lost``, ``on_lost`` called) right after it is
    taken, or right after the command's environment is built: before the GPU work starts either way."""
    from airflow_gpu_dag.gpu.lease import Lease

    def lose(lease: Lease) -> None:
        lease.state = "lost"
        op._on_lease_lost(lease)

    if after_get_env:
        get_env = op.get_env

        def env_then_lost(ctx: Any) -> dict:
            env = get_env(ctx)
            lose(op._gpu_lease)
            return env

        op.get_env = env_then_lost
        return
    acquire = op._acquire_gpu_lease

    def acquire_then_lost(ctx: Any) -> Lease:
        lease = acquire(ctx)
        lose(lease)
        return lease

    op._acquire_gpu_lease = acquire_then_lost


@pytest.mark.parametrize("after_get_env", [False, True], ids=["before_get_env", "before_popen"])
def test_bash_command_does_not_run_on_a_lease_lost_before_it_started(
    tmp_path: Path, after_get_env: bool
) -> None:
    from airflow_gpu_dag.gpu.lease import LeaseLost

    marker = tmp_path / "ran"
    op = GpuBashOperator(task_id="victim", bash_command=f"sleep 1; touch {marker}", gpus=1)
    _lost_once_leased(op, after_get_env=after_get_env)
    with pytest.raises(LeaseLost):
        op.execute(context("victim"))
    time.sleep(1.5)
    assert not marker.exists(), "the command ran on GPUs its lease no longer held"


def test_python_callable_does_not_run_on_a_lease_lost_before_it_started() -> None:
    from airflow_gpu_dag.gpu.lease import LeaseLost

    ran: list[bool] = []
    op = GpuPythonOperator(task_id="victim", python_callable=lambda: ran.append(True), gpus=1)
    _lost_once_leased(op)
    with pytest.raises(LeaseLost):
        op.execute(context("victim"))
    assert not ran, "the callable ran on GPUs its lease no longer held"


_RECORDS_ITS_GROUP = """
import json, os
from types import SimpleNamespace
from airflow_gpu_dag.gpu.lease import LeaseManager, LeaseSettings
from airflow_gpu_dag.operators.gpu import GpuPythonOperator

def train(gpu_lease=None):
    # before the callable has started anything: what does the lease say its work is?
    leases = LeaseManager(LeaseSettings.from_config()).leases()
    (record,) = [r for r in leases if r["lease_id"] == gpu_lease["lease_id"]]
    print("SEEN", json.dumps({"pid": os.getpid(), "processes": record["processes"]}), flush=True)

ti = SimpleNamespace(dag_id="gpu_dag", run_id="run1", task_id="t", map_index=-1, try_number=1)
GpuPythonOperator(task_id="t", python_callable=train, gpus=1).execute({"ti": ti, "task_instance": ti})
"""


@pytest.mark.parametrize("leads_its_group", [True, False], ids=["task_sdk_process", "shared_group"])
def test_a_python_task_records_its_process_group_as_it_takes_the_lease(
    static_host: Path, leads_its_group: bool
) -> None:
    # Airflow's task supervisor forks each task process into a group of its own (setpgid); here a new
    # session does the same. Every process the callable starts is in that group from its first instant,
    # so the lease records the group before the callable runs. Before, it recorded nothing until the
    # callable ended, and a task process killed with -9 left its children on GPUs leased again.
    # A process that shares its group (dag.test(), a test runner) records none: the group is not its own.
    import json
    import subprocess
    import sys

    task = subprocess.run(
        [sys.executable, "-c", _RECORDS_ITS_GROUP],
        start_new_session=leads_its_group,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert task.returncode == 0, task.stderr
    (line,) = [line for line in task.stdout.splitlines() if line.startswith("SEEN ")]
    seen = json.loads(line.removeprefix("SEEN "))
    if leads_its_group:
        assert [(p["pid"], p["pgid"]) for p in seen["processes"]] == [(seen["pid"], seen["pid"])]
        assert seen["processes"][0]["start"] is not None
    else:
        assert seen["processes"] == []
