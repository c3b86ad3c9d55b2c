"""Tests of ``airflow_gpu_dag.operators.gpu``: the lease-based GPU operators on a static inventory."""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import logging
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pendulum
import pytest
from airflow.sdk import DAG, TaskGroup, task
from airflow.sdk.exceptions import AirflowException, AirflowTaskTimeout

from airflow_gpu_dag.core.model.resources import GpuRequest
from airflow_gpu_dag.executor_config import read_hints
from airflow_gpu_dag.gpu.inventory import GpuDevice, GpuInventory, InventoryError, parse_inventory
from airflow_gpu_dag.gpu.lease import LeaseManager, LeaseOwner, LeaseSettings, LeaseTableCorrupt
from airflow_gpu_dag.gpu.process import process_start_token
from airflow_gpu_dag.gpu.usage import UsageLedger
from airflow_gpu_dag.hooks import airflow_api
from airflow_gpu_dag.hooks.airflow_api import CONN_TYPE, AirflowApiHook
from airflow_gpu_dag.hooks.rest_client import AirflowRestClient
from airflow_gpu_dag.operators.gpu import GpuBashOperator, GpuPythonOperator
from tests.unit.operators.conftest import OVERRIDE, assert_keeps_default, context, make_dag, pod_dag


# -- leases -------------------------------------------------------------------------------------
def _table_with(m: LeaseManager, record: dict[str, Any]) -> None:
    m.dir.mkdir(parents=True, exist_ok=True)
    m.table_path.write_text(json.dumps({"version": 1, "leases": {record["lease_id"]: record}}))


def _foreign_record(now: float, **changes: Any) -> dict[str, Any]:
    """A lease of GPU 0 held by a process in another pid namespace (a worker container sharing the
    lease directory): only its heartbeat tells whether it is alive."""
    record: dict[str, Any] = {
        "lease_id": "foreign",
        "devices": [0],
        "uuids": [None],
        "owner": {"dag_id": "d", "task_id": "t", "run_id": "r", "map_index": -1, "try_number": 1},
        "holder": {"pid": 4242, "start": "1", "host": "elsewhere", "boot_id": None, "pidns": "other"},
        "processes": [],
        "acquired_at": now,
        "heartbeat_at": now,
        "ttl_s": 0.5,
    }
    record.update(changes)
    return record


# -- the REST hook ------------------------------------------------------------------------------
SECRET = "h0st-pa55-SECRET"


PASSWORD = "pa55-w0rd-SECRET"


TOKEN = "tok-eyJhbGciOi-SECRET"


# -- inventory ----------------------------------------------------------------------------------
def test_a_static_inventory_with_one_uuid_on_two_gpus_is_refused(tmp_path: Path) -> None:
    # Leases match devices by UUID: with one UUID on two GPUs, a lease of GPU 0 would mark GPU 1 (the
    # last device with that UUID) as held and hand GPU 0 to every task that asks, so it is refused.
    spec = {
        "gpus": [
            {"index": 0, "type": "a100", "uuid": "GPU-x"},
            {"index": 1, "type": "a100", "uuid": "GPU-x"},
            {"index": 2, "type": "a100", "uuid": "GPU-y"},
        ]
    }
    with pytest.raises(InventoryError, match=r"UUIDs must be unique.*GPU-x"):
        parse_inventory(json.dumps(spec))
    with pytest.raises(InventoryError, match="UUIDs must be unique"):
        GpuInventory((GpuDevice(0, "a100", uuid="GPU-x"), GpuDevice(1, "a100", uuid="GPU-x")))
    # devices without a UUID (a static inventory) are still fine
    assert (
        parse_inventory('{"gpus": [{"index": 0, "type": "a100"}, {"index": 1, "type": "a100"}]}').count == 2
    )


@pytest.mark.parametrize("spec", ["2xa100:0GiB", '{"gpus": [{"index": 0, "type": "a100", "memory": 0}]}'])
def test_a_static_gpu_with_no_memory_at_all_is_refused(spec: str) -> None:
    # A GPU of 0 bytes would show as "#0 a100 -" (as if the size were unknown) while every memory
    # request on the host is impossible, so it is refused.
    with pytest.raises(InventoryError, match="must be more than 0"):
        parse_inventory(spec)
    # no free memory right now is a real state (a full GPU)
    device = parse_inventory('{"gpus": [{"index": 0, "type": "a100", "memory": "80GiB", "free_memory": 0}]}')
    assert device.device(0).free_mib == 0


def test_a_dead_lease_written_before_the_clock_was_set_back_is_reclaimed_within_the_ttl(
    tmp_path: Path,
) -> None:
    # The clock was set back an hour after the holder's last heartbeat, then the holder died. Before,
    # its heartbeat stayed "in the future" and the GPU was held for an hour plus the ttl, not the ttl.
    m = LeaseManager(
        LeaseSettings(lease_dir=tmp_path / "leases", ttl_s=0.5, heartbeat_s=0.1, poll_s=0.05),
        parse_inventory("1xa100:80GiB"),
    )
    ahead = time.time() + 3600
    _table_with(m, _foreign_record(ahead, acquired_at=ahead - 10, heartbeat_at=ahead))
    assert m.try_acquire(GpuRequest(1)) is None  # not at once: a live holder renews within the ttl
    time.sleep(0.8)
    lease = m.try_acquire(GpuRequest(1))
    assert lease is not None and lease.devices == (0,)
    reclaimed = [r for r in m.ledger.read() if r.outcome == "reclaimed"]
    assert [r.lease_id for r in reclaimed] == ["foreign"]


def test_a_live_holder_keeps_its_lease_when_the_clock_was_set_back(tmp_path: Path) -> None:
    m = LeaseManager(
        LeaseSettings(lease_dir=tmp_path / "leases", ttl_s=60, heartbeat_s=5, poll_s=0.05),
        parse_inventory("1xa100:80GiB"),
    )
    lease = m.acquire(GpuRequest(1), LeaseOwner(task_id="a", dag_id="d"))
    table = json.loads(m.table_path.read_text())
    table["leases"][lease.lease_id]["heartbeat_at"] = time.time() + 3600
    m.table_path.write_text(json.dumps(table))
    assert m.reclaim_stale() == []
    assert lease.heartbeat() and not lease.lost
    assert m.try_acquire(GpuRequest(1)) is None


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        ({"heartbeat_at": None}, "'heartbeat_at' is not a number"),
        ({"acquired_at": None}, "'acquired_at' is not a number"),
        ({"heartbeat_at": float("nan")}, "'heartbeat_at' is not a number"),
        ({"ttl_s": float("inf")}, "'ttl_s' is not a number"),
    ],
)
def test_a_lease_record_with_a_null_or_non_finite_time_is_a_corrupt_table(
    tmp_path: Path, damage: dict[str, Any], reason: str
) -> None:
    # A null time would crash every allocation on the host with TypeError (past the operators'
    # `except LeaseError`); NaN/Infinity would make the lease never stale: held for ever.
    m = LeaseManager(
        LeaseSettings(lease_dir=tmp_path / "leases", ttl_s=0.5, heartbeat_s=0.1, poll_s=0.05),
        parse_inventory("1xa100:80GiB"),
    )
    _table_with(m, _foreign_record(time.time() - 60, **damage))
    with pytest.raises(LeaseTableCorrupt, match="remove or repair") as err:
        m.try_acquire(GpuRequest(1))
    assert reason in str(err.value)


def test_credentials_in_the_connection_host_are_not_sent_nor_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    # With host "http://admin:<secret>@api:8080" kept in the base URL, every message of the Test
    # button and the controller would show the password, and httpx would send it as Basic auth,
    # replacing the bearer token on every call (401 for ever).
    seen: list[tuple[str, str | None]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        auth = request.headers.get("Authorization")
        seen.append((str(request.url), auth))
        if request.url.path == airflow_api.HEALTH_PATH:
            return httpx.Response(200, json={"metadatabase": {"status": "healthy"}})
        if request.url.path == "/auth/token":
            return httpx.Response(201, json={"access_token": TOKEN})
        if request.url.path == "/api/v2/pools":
            if auth != f"Bearer {TOKEN}":
                return httpx.Response(401, json={"detail": "Not authenticated"})
            return httpx.Response(200, json={"pools": []})
        return httpx.Response(404)

    def client(*args: Any, **kwargs: Any) -> AirflowRestClient:
        return AirflowRestClient(*args, transport=httpx.MockTransport(handler), **kwargs)

    monkeypatch.setattr(airflow_api, "AirflowRestClient", client)
    conn = {
        "conn_type": CONN_TYPE,
        "host": f"http://admin:{SECRET}@api:8080",
        "login": "admin",
        "password": PASSWORD,
    }
    monkeypatch.setenv("AIRFLOW_CONN_HOSTCREDS", json.dumps(conn))
    hook = AirflowApiHook("hostcreds")
    assert hook.get_client().base_url == "http://api:8080"
    ok, message = hook.test_connection()
    assert ok, message
    assert SECRET not in message and PASSWORD not in message
    assert all(SECRET not in url for url, _ in seen)
    assert seen[-1][1] == f"Bearer {TOKEN}"
    # the connection failing is no different: the message names the URL without the password
    monkeypatch.setenv("AIRFLOW_CONN_HOSTCREDS", json.dumps({**conn, "host": f"http://admin:{SECRET}@api:x"}))
    ok, message = AirflowApiHook("hostcreds").test_connection()
    assert not ok and "port that is not a number" in message
    assert SECRET not in message


@pytest.mark.parametrize("bad", ["NaN", "Infinity", "1e20", "-5"])
def test_a_usage_line_with_a_time_that_is_not_a_moment_is_skipped(tmp_path: Path, bad: str) -> None:
    """A ledger line with ``"end": NaN`` (or Infinity, 1e20) was read as a record, and every budget summary
    (GPU-seconds per pool and day) then raised: such a line is skipped like any malformed one."""
    from airflow_gpu_dag.gpu.usage import UsageLedger, gpu_seconds_by_pool_day

    path = tmp_path / "usage.jsonl"
    good = {"dag_id": "d", "run_id": "r", "task_id": "t", "devices": [0], "start": 1_796_040_000.0}
    path.write_text(
        json.dumps({**good, "end": 1_796_040_060.0, "pool": "gpu", "lease_id": "a"})
        + "\n"
        + json.dumps({**good, "lease_id": "b", "pool": "gpu"})[:-1]
        + f', "end": {bad}}}\n'
    )
    records = UsageLedger(path).read()
    assert [r.lease_id for r in records] == ["a"]
    assert gpu_seconds_by_pool_day(records) == {("gpu", "2026-11-30"): 60.0}


# -- A GPU bash task gives its GPUs back only once its command's whole process group is gone.


def _slow_child(pid_file: Path) -> str:
    """bash runs a python child that takes 3 s to clean up after SIGTERM; bash itself dies at once."""
    child = (
        "import os, signal, time; "
        f"open('{pid_file}', 'w').write(str(os.getpid())); "
        "signal.signal(signal.SIGTERM, lambda *a: (time.sleep(3), os._exit(0))); "
        "time.sleep(60)"
    )
    return f'python3 -c "{child}"; echo finished'


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    return state != "Z"


def _spy_release(op: GpuBashOperator, pid_file: Path) -> list[bool]:
    """Records, at each release, whether the child was still alive."""
    alive_at_release: list[bool] = []
    finish = op._finish_gpu_lease

    def spy(outcome: str) -> None:
        alive_at_release.append(_alive(int(pid_file.read_text())))
        finish(outcome)

    op._finish_gpu_lease = spy  # type: ignore[method-assign]
    return alive_at_release


def _wait_for(pid_file: Path, manager: LeaseManager) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if (
            pid_file.exists()
            and pid_file.read_text()
            and manager.leases()
            and manager.leases()[0]["processes"]
        ):
            return
        time.sleep(0.05)
    raise AssertionError("the command never started")


def _kill(pid_file: Path) -> None:
    with contextlib.suppress(ProcessLookupError, ValueError, FileNotFoundError):
        os.kill(int(pid_file.read_text()), signal.SIGKILL)


def _run(op: GpuBashOperator, errors: list[BaseException]) -> None:
    try:
        op.execute(context("train"))
    except BaseException as err:
        errors.append(err)


@pytest.mark.usefixtures("static_host")
def test_on_kill_waits_for_the_child_before_giving_the_gpus_back(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    with make_dag():
        op = GpuBashOperator(task_id="train", gpus=4, bash_command=_slow_child(pid_file))
    op.command_stop_grace_s = 10.0  # the child's 3-s cleanup fits: it ends on SIGTERM
    alive_at_release = _spy_release(op, pid_file)
    errors: list[BaseException] = []
    thread = threading.Thread(target=lambda: _run(op, errors))
    thread.start()
    manager = LeaseManager(LeaseSettings.from_config())
    try:
        _wait_for(pid_file, manager)
        op.on_kill()
        thread.join(30)
        assert alive_at_release and not any(alive_at_release)
        assert manager.leases() == []
    finally:
        _kill(pid_file)


@pytest.mark.usefixtures("static_host")
def test_execution_timeout_waits_for_the_child_too(tmp_path: Path) -> None:
    from airflow.sdk.execution_time.task_runner import _run_execute_callable

    pid_file = tmp_path / "child.pid"
    with make_dag():
        op = GpuBashOperator(
            task_id="train",
            gpus=4,
            execution_timeout=datetime.timedelta(seconds=2),
            bash_command=_slow_child(pid_file),
        )
    op.command_stop_grace_s = 0.5  # shorter than the cleanup: SIGKILL to the group
    alive_at_release = _spy_release(op, pid_file)
    try:
        with pytest.raises(AirflowTaskTimeout):
            _run_execute_callable(context("train"), op.execute, op)  # type: ignore[arg-type]
        assert alive_at_release and not any(alive_at_release)
        assert LeaseManager(LeaseSettings.from_config()).leases() == []
    finally:
        _kill(pid_file)


@pytest.mark.usefixtures("static_host")
def test_a_sigterm_before_the_command_starts_keeps_it_from_starting(
    static_host: Path,
    tmp_path: Path,
) -> None:
    marker = tmp_path / "ran"
    with make_dag():
        op = GpuBashOperator(task_id="train", gpus=4, bash_command=f"touch {marker}")
    manager = LeaseManager(LeaseSettings.from_config())
    held_after_on_kill: list[int] = []
    get_env = op.get_env

    def sigterm_now(ctx: Any) -> dict:  # Airflow's SIGTERM handler runs between lease and Popen
        op.on_kill()
        held_after_on_kill.append(len(manager.leases()))
        return get_env(ctx)

    op.get_env = sigterm_now  # type: ignore[method-assign]
    with pytest.raises(AirflowException, match=r"killed before its GPU command started"):
        op.execute(context("train"))
    assert held_after_on_kill == [1]  # not handed out while this task could still start its command
    assert not marker.exists()
    assert manager.leases() == []
    assert [r.outcome for r in UsageLedger(static_host / "usage.jsonl").read()] == ["killed"]


@pytest.mark.usefixtures("static_host")
def test_a_background_process_left_by_the_command_is_stopped_before_the_release(tmp_path: Path) -> None:
    pid_file = tmp_path / "bg.pid"
    with make_dag():
        op = GpuBashOperator(
            task_id="train", gpus=4, bash_command=f"sleep 60 > /dev/null 2>&1 & echo $! > {pid_file}"
        )
    op.command_stop_grace_s = 2.0
    alive_at_release = _spy_release(op, pid_file)
    try:
        op.execute(context("train"))
        assert alive_at_release == [False]
        assert LeaseManager(LeaseSettings.from_config()).leases() == []
    finally:
        _kill(pid_file)


def _forget_lease(lease_dir: Path) -> None:
    """Remove every lease from the table, as a reclaim by another worker would: under the table lock,
    so a heartbeat that read the table just before cannot write the lease back."""
    from airflow_gpu_dag.gpu.lease_table import LOCK_FILE, TABLE_FILE

    with open(lease_dir / LOCK_FILE, "a+") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            table_path = lease_dir / TABLE_FILE
            table = json.loads(table_path.read_text())
            table["leases"] = {}
            table_path.write_text(json.dumps(table))
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


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


# -- declaration --------------------------------------------------------------------------------------
@pytest.mark.usefixtures("static_host")
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


@pytest.mark.usefixtures("static_host")
def test_existing_executor_config_is_kept() -> None:
    op = GpuBashOperator(task_id="t", bash_command="echo", gpus=1, executor_config={"pod_override": {"x": 1}})
    assert (op.executor_config or {})["pod_override"] == {"x": 1}
    assert read_hints(op.executor_config)["gpus"] == 1


@pytest.mark.usefixtures("static_host")
def test_80g_and_80gib_both_fit_an_80gib_gpu() -> None:
    assert GpuBashOperator(task_id="a", bash_command="echo", gpu_memory="80G").gpu_request.memory_mib == 76294
    assert (
        GpuBashOperator(task_id="b", bash_command="echo", gpu_memory="80GiB").gpu_request.memory_mib == 81920
    )


@pytest.mark.usefixtures("static_host")
def test_decorator_builds_a_gpu_task() -> None:

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


@pytest.mark.usefixtures("static_host")
def test_mapped_tasks_carry_pool_slots_and_hints() -> None:

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


@pytest.mark.usefixtures("static_host")
def test_hints_pool_and_slots_survive_serialization() -> None:
    from airflow.serialization.serialized_objects import DagSerialization

    with make_dag("ser") as dag:
        GpuBashOperator(task_id="train", bash_command="echo", gpus=3, gpu_type="a100", duration="2h")
    restored = DagSerialization.from_dict(DagSerialization.to_dict(dag))
    task = restored.get_task("train")
    assert (task.pool, task.pool_slots) == ("gpu_a100", 3)
    assert read_hints(task.executor_config) == {"duration_s": 7200.0, "gpus": 3, "gpu_type": "a100"}


@pytest.mark.usefixtures("static_host")
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


@pytest.mark.usefixtures("static_host")
def test_failed_command_releases_its_lease(static_host: Path) -> None:
    from airflow.sdk.exceptions import AirflowException

    op = GpuBashOperator(task_id="crash", bash_command="exit 3", gpus=4)
    with pytest.raises(AirflowException, match="non-zero exit code 3"):
        op.execute(context("crash"))
    assert LeaseManager(LeaseSettings.from_config()).leases() == []
    assert [r.outcome for r in UsageLedger(static_host / "usage.jsonl").read()] == ["failed"]


@pytest.mark.usefixtures("static_host")
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


@pytest.mark.usefixtures("static_host")
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


@pytest.mark.usefixtures("static_host")
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


@pytest.mark.usefixtures("static_host")
def test_lease_wait_times_out_with_a_clear_error(static_host: Path) -> None:
    from airflow.sdk.exceptions import AirflowException

    LeaseManager(LeaseSettings.from_config()).acquire(GpuRequest(4))
    op = GpuBashOperator(task_id="late", bash_command="echo", gpus=1, lease_timeout="0.3s")
    with pytest.raises(AirflowException, match=r"gpu_dag\.late .*waited 0s.*Fix:"):
        op.execute(context("late"))


@pytest.mark.usefixtures("static_host")
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


@pytest.mark.usefixtures("static_host")
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


@pytest.mark.usefixtures("static_host")
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


@pytest.mark.usefixtures("static_host")
def test_python_callable_does_not_run_on_a_lease_lost_before_it_started() -> None:
    from airflow_gpu_dag.gpu.lease import LeaseLost

    ran: list[bool] = []
    op = GpuPythonOperator(task_id="victim", python_callable=lambda: ran.append(True), gpus=1)
    _lost_once_leased(op)
    with pytest.raises(LeaseLost):
        op.execute(context("victim"))
    assert not ran, "the callable ran on GPUs its lease no longer held"


@pytest.mark.usefixtures("static_host")
@pytest.mark.parametrize("leads_its_group", [True, False], ids=["task_sdk_process", "shared_group"])
def test_a_python_task_records_its_process_group_as_it_takes_the_lease(
    static_host: Path, leads_its_group: bool
) -> None:
    # Airflow's task supervisor forks each task process into a group of its own (setpgid); here a new
    # session does the same. Every process the callable starts is in that group from its first instant,
    # so the lease records the group before the callable runs: a task process killed with -9 then
    # leaves no children on GPUs that are leased again.
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


def _child_running_at_release(op: GpuPythonOperator, pid_file: Path) -> list[bool]:
    """Whether the child written to ``pid_file`` still ran each time ``op`` released its lease."""
    seen: list[bool] = []
    finish = op._finish_gpu_lease

    def spy(outcome: str) -> None:
        seen.append(_running(int(pid_file.read_text())))
        finish(outcome)

    op._finish_gpu_lease = spy  # type: ignore[method-assign]
    return seen


def _python_task_context(task_id: str) -> dict[str, Any]:
    ti = SimpleNamespace(dag_id="gpu_dag", run_id="run1", task_id=task_id, map_index=-1, try_number=1)
    return {"ti": ti, "task_instance": ti}


def _running(pid: int) -> bool:
    return process_start_token(pid) is not None  # a zombie (exited, not reaped) counts as gone


# -- processes a Python callable starts --------------------------------------------------------------
def test_a_process_the_callable_left_running_is_stopped_before_its_gpus_are_given_back(
    static_host: Path, tmp_path: Path
) -> None:
    # A trainer the callable started (torchrun, a multiprocessing worker) must not keep running on
    # GPUs the next task is given once the callable returns and the lease is released.
    pid_file = tmp_path / "child.pid"

    def train() -> None:
        child = subprocess.Popen(["sleep", "60"])
        pid_file.write_text(str(child.pid))

    op = GpuPythonOperator(task_id="spawner", python_callable=train, gpus=1)
    op.child_stop_grace_s = 2.0
    seen = _child_running_at_release(op, pid_file)
    try:
        op.execute(_python_task_context("spawner"))
        assert seen == [False]
        assert LeaseManager(LeaseSettings.from_config()).leases() == []
        assert [r.outcome for r in UsageLedger(static_host / "usage.jsonl").read()] == ["success"]
    finally:
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)


def test_sigterm_stops_the_callables_processes_before_the_lease_is_released(
    static_host: Path, tmp_path: Path
) -> None:
    # Airflow's task process calls on_kill from its SIGTERM handler: the callable is interrupted and
    # the lease released. A child that ignores SIGTERM is killed so it cannot run on the released GPUs.
    pid_file = tmp_path / "child.pid"
    op = GpuPythonOperator(task_id="stubborn", python_callable=lambda: None, gpus=2)
    op.child_stop_grace_s = 0.5

    def train() -> None:
        child = subprocess.Popen(["bash", "-c", "trap '' TERM; sleep 60 & wait"])
        pid_file.write_text(str(child.pid))
        time.sleep(0.3)  # bash has set its trap and started sleep
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)

    op.python_callable = train
    previous = signal.signal(signal.SIGTERM, lambda *_: op.on_kill())
    seen = _child_running_at_release(op, pid_file)
    try:
        from airflow.sdk.exceptions import AirflowException

        with pytest.raises(AirflowException, match="SIGTERM"):
            op.execute(_python_task_context("stubborn"))
        assert seen == [False]
        assert [r.outcome for r in UsageLedger(static_host / "usage.jsonl").read()] == ["killed"]
    finally:
        signal.signal(signal.SIGTERM, previous)
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)


def test_a_sigterm_between_the_lease_and_the_callable_keeps_the_callable_from_starting(
    static_host: Path,
) -> None:
    # on_kill ran after the lease was taken but before the callable started (it raises into the
    # callable only while it runs). The SIGTERM is remembered, so the callable never starts.
    from airflow.sdk.exceptions import AirflowException

    ran: list[bool] = []
    op = GpuPythonOperator(task_id="late_kill", python_callable=lambda: ran.append(True), gpus=1)
    acquire = op._acquire_gpu_lease

    def acquire_then_sigterm(ctx: Any) -> Any:
        lease = acquire(ctx)
        op.on_kill()
        return lease

    op._acquire_gpu_lease = acquire_then_sigterm  # type: ignore[method-assign]
    with pytest.raises(AirflowException, match="killed before its GPU callable started"):
        op.execute(_python_task_context("late_kill"))
    assert not ran
    assert LeaseManager(LeaseSettings.from_config()).leases() == []
    assert [r.outcome for r in UsageLedger(static_host / "usage.jsonl").read()] == ["killed"]


GROUP_DEFAULTS: Any = {"executor_config": OVERRIDE}


def test_gpu_operators_keep_the_dags_default_executor_config() -> None:
    # The lease-based GPU operators leave executor_config unset, so Airflow fills it from
    # default_args: every GpuBashOperator/GpuPythonOperator, mapped or not, keeps the DAG's
    # pod_override, as the Kubernetes operator does.
    with pod_dag("ec_ops", default_args={"executor_config": OVERRIDE}):
        plain: Any = GpuBashOperator(task_id="plain", bash_command="x", gpus=2)
        python: Any = GpuPythonOperator(task_id="python", python_callable=lambda: 1)
        mapped = GpuBashOperator.partial(task_id="mapped", gpus=2, gpu_type="a100").expand(
            bash_command=["a", "b"]
        )
    assert_keeps_default(plain.executor_config, 2)
    assert_keeps_default(python.executor_config, 1)
    assert_keeps_default(mapped.partial_kwargs["executor_config"], 2)
    assert mapped.partial_kwargs["pool"] == "gpu_a100" and mapped.partial_kwargs["pool_slots"] == 2
    # a task group's default_args count too, and the task's own executor_config still wins
    with (
        pod_dag("ec_group", default_args={"executor_config": {"pod_override": "dag"}}),
        TaskGroup("g", default_args=GROUP_DEFAULTS),
    ):
        grouped = GpuBashOperator.partial(task_id="m", gpus=2).expand(bash_command=["a"])
        own: Any = GpuBashOperator(task_id="own", bash_command="x", executor_config={"mine": 1})
    assert_keeps_default(grouped.partial_kwargs["executor_config"], 2)
    assert own.executor_config["mine"] == 1 and "pod_override" not in own.executor_config


@pytest.mark.usefixtures("_no_configured_limits")
def test_the_gpu_operator_logs_how_it_read_the_type(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING), DAG("spell", schedule=None):
        task = GpuBashOperator(task_id="t", bash_command="true", gpu_type="a-100")
    assert task.pool == "gpu_a_100"
    assert "'a-100' is read as 'a_100'" in caplog.text and "DAG 'spell'" in caplog.text
