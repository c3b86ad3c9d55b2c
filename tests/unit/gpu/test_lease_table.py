"""Tests of ``airflow_gpu_dag.gpu.lease_table``.

Property tests: random acquire/release/crash sequences never give a device twice or exceed the inventory;
arbitrary and damaged lease records never crash it nor free a device whose holder is alive or unknown.
Then :class:`LeaseTable` called directly: the lock, load and atomic save (damaged, truncated and
unreadable files, concurrent writers), staleness, the work of a lease, its reclaim and its usage record.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from airflow_gpu_dag.core.model.resources import GpuRequest
from airflow_gpu_dag.gpu import lease_table
from airflow_gpu_dag.gpu.inventory import GpuDevice, GpuInventory
from airflow_gpu_dag.gpu.lease import Lease, LeaseManager, LeaseSettings
from airflow_gpu_dag.gpu.lease_errors import LeaseError, LeaseTableCorrupt, LeaseTimeout
from airflow_gpu_dag.gpu.lease_table import LEASE_ENV, LeaseTable, group_exists
from airflow_gpu_dag.gpu.process import HostIdentity, process_start_token

#: Above Linux's largest pid_max (2**22): no process ever has it, so its holder is "dead".
DEAD_PID = 2**22 + 7


TYPES = ("a100", "h100")


MEMORY = (16 * 1024, 80 * 1024)


class LeaseMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="lease-prop-"))
        self.held: dict[str, Lease] = {}
        self.crashed: set[str] = set()

    def teardown(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    @initialize(
        devices=st.lists(st.tuples(st.sampled_from(TYPES), st.sampled_from(MEMORY)), min_size=1, max_size=8)
    )
    def make_host(self, devices: list[tuple[str, int]]) -> None:
        self.inventory = GpuInventory(tuple(GpuDevice(i, t, m) for i, (t, m) in enumerate(devices)))
        self.manager = LeaseManager(LeaseSettings(lease_dir=self.dir, poll_s=0.01), self.inventory)

    def _free_matching(self, request: GpuRequest) -> int:
        taken = {d for lease in self.held.values() for d in lease.devices}
        return sum(
            1
            for d in self.inventory.devices
            if d.index not in taken and d.fits_now(request.memory_mib, request.gpu_type)
        )

    @rule(
        count=st.integers(1, 8),
        gpu_type=st.sampled_from((None, *TYPES)),
        memory=st.sampled_from((None, 8 * 1024, 40 * 1024)),
        crash=st.booleans(),
    )
    def acquire(self, count: int, gpu_type: str | None, memory: int | None, crash: bool) -> None:
        request = GpuRequest(count, memory, gpu_type)
        if self.inventory.why_impossible(count, memory, gpu_type):
            return  # impossible requests are rejected at once (unit-tested elsewhere)
        # a crashed holder's lease is reclaimed before the allocation: forget it in the model first
        for lease_id in list(self.crashed):
            self.held.pop(lease_id, None)
        self.crashed.clear()
        expected_ok = self._free_matching(request) >= count
        lease = self.manager.try_acquire(request, holder_pid=DEAD_PID if crash else None)
        assert (lease is not None) == expected_ok, (request, self.manager.leases())
        if lease is not None:
            assert len(lease.devices) == count
            for index in lease.devices:
                assert self.inventory.device(index).fits_now(memory, gpu_type)
            self.held[lease.lease_id] = lease
            if crash:
                self.crashed.add(lease.lease_id)

    @precondition(lambda self: bool(self.held))
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        # in acquisition order: lease ids are random, so sorting them would make hypothesis pick a
        # different lease when it replays the same choices (FlakyStrategyDefinition)
        lease_id = data.draw(st.sampled_from(list(self.held)))
        lease = self.held.pop(lease_id)
        released = lease.release()
        # a crashed holder's lease may already be reclaimed; a live one is always released
        assert released or lease_id in self.crashed
        self.crashed.discard(lease_id)

    @invariant()
    def table_is_consistent(self) -> None:
        if not hasattr(self, "manager"):
            return
        records = self.manager.leases()
        devices = [d for r in records for d in r["devices"]]
        assert len(devices) == len(set(devices)), "a device is leased twice"
        assert set(devices) <= set(self.inventory.indices), "a device outside the inventory"
        assert len(devices) <= self.inventory.count
        live = {lid for lid in self.held if lid not in self.crashed}
        assert live <= {r["lease_id"] for r in records}, "a live lease disappeared"


LeaseMachine.TestCase.settings = settings(
    max_examples=40,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


# -- arbitrary and damaged lease records ------------------------------------------------------------
#: Any JSON value (what a damaged or hand-edited table can hold).
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)


MISSING = object()


ALIGNED = object()


#: Values of the fields a reader could misread as free devices (or trip over), valid and damaged ones.
#: ``uuids`` holds no UUID unknown to the inventory: that one is, by design, a GPU another container sees.
FIELD_VALUES = {
    "uuids": st.sampled_from([MISSING, ALIGNED, None, [], "GPU-0", [7], [None], {"0": "GPU-0"}, [["GPU-0"]]]),
    "ttl_s": st.sampled_from([MISSING, None, 3600.0, 86400, -1, -1e-9, 0, "60", True, [60]]),
    "owner": st.sampled_from([MISSING, None, {}, {"dag_id": "d", "task_id": "t"}, {"bogus": 1}, ["d"], "d"])
    | st.dictionaries(st.sampled_from(["dag_id", "task_id", "map_index", "try_number", "pool"]), JSON),
    "processes": st.sampled_from([MISSING, None, [], "7", [7], [{"pid": "7"}], [{"pid": 0}], [{}]])
    | st.lists(st.fixed_dictionaries({}, optional={"pid": JSON, "start": JSON, "pgid": JSON}), max_size=2),
    "reclaim": st.sampled_from([MISSING, "now", [], {"signal": "SIGHUP"}, {"since": "x"}, {"reason": 5}]),
    "lease_id": st.sampled_from([MISSING, None, 7]) | JSON,
    "acquired_at": st.sampled_from([MISSING, 0, 1e9, "x", None, float("nan")]),
    "holder_extra": st.sampled_from([MISSING, {"host": 5}, {"start": 12}, {"pid": True}, {"pid": -3}]),
}


@st.composite
def held_records(draw: st.DrawFn, indices: list[int]) -> dict[str, Any]:
    """A lease of ``indices`` whose holder is this live process or one on another host (unknown), with
    a fresh heartbeat, and its other fields drawn from :data:`FIELD_VALUES` (some valid, some not).
    Whatever they are, its devices must stay held: refused as a corrupt table, or read as held."""
    from airflow_gpu_dag.gpu.process import HostIdentity

    me = HostIdentity.current()
    if draw(st.booleans()):
        holder: dict[str, Any] = me.holder(os.getpid())
    else:
        holder = {"pid": draw(st.integers(1, 2**22)), "start": "1", "host": "another-host", "boot_id": None}
        holder["pidns"] = None
    devices = draw(st.lists(st.sampled_from(indices), min_size=1, max_size=len(indices), unique=True))
    record: dict[str, Any] = {
        "devices": devices,
        "holder": holder,
        "heartbeat_at": time.time() + 60,  # fresh however long the example takes
        "heartbeat_mono": time.monotonic() + 60,
    }
    for key, values in FIELD_VALUES.items():
        value = draw(values)
        if value is MISSING:
            continue
        if key == "holder_extra":
            holder.update(cast(dict[str, Any], value))
        elif value is ALIGNED:
            record[key] = [f"GPU-{i}" for i in devices]
        else:
            record[key] = value
    return record


TestLeaseProperties = LeaseMachine.TestCase


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    size=st.integers(1, 4),
    with_uuids=st.booleans(),
    data=st.data(),
    junk=st.dictionaries(st.text(min_size=1, max_size=8), JSON, max_size=2),
    count=st.integers(1, 4),
)
def test_damaged_lease_records_never_crash_the_table_nor_free_a_held_device(
    size: int, with_uuids: bool, data: st.DataObject, junk: dict[str, Any], count: int
) -> None:
    import json

    from airflow_gpu_dag.gpu.lease import LeaseOwner, LeaseTableCorrupt
    from airflow_gpu_dag.gpu.lease_view import held_devices

    lease_dir = Path(tempfile.mkdtemp(prefix="lease-fuzz-"))
    try:
        inventory = GpuInventory(
            tuple(GpuDevice(i, "a100", 81920, uuid=f"GPU-{i}" if with_uuids else None) for i in range(size)),
            source="nvml" if with_uuids else "static",
        )
        held = {
            f"held{i}": data.draw(held_records(list(range(size))))
            for i in range(data.draw(st.integers(0, 2)))
        }
        (lease_dir / "leases.json").write_text(json.dumps({"version": 1, "leases": {**junk, **held}}))
        # kill_orphans off: nothing a fuzzed record names is ever signalled
        manager = LeaseManager(LeaseSettings(lease_dir=lease_dir, poll_s=0.01, kill_orphans=False), inventory)
        try:  # a corrupt table is the one error allowed: never a crash, never a guess
            lease = manager.try_acquire(GpuRequest(min(count, size)), LeaseOwner(task_id="next"))
            manager.reclaim_stale()
            held_devices(lease_dir)
            manager.leases()
        except LeaseTableCorrupt:
            return
        taken = {d for r in held.values() for d in r["devices"]}
        assert lease is None or not taken & set(lease.devices), ("a held device leased again", held, lease)
        table = json.loads((lease_dir / "leases.json").read_text())["leases"]
        assert set(held) <= set(table), ("a held lease was reclaimed", held, table)
    finally:
        shutil.rmtree(lease_dir, ignore_errors=True)


# -- LeaseTable called directly ---------------------------------------------------------------------
ME = HostIdentity.current()


#: A fixed "now" for leases judged by their wall-clock heartbeat.
NOW = 1_800_000_000.0


def _table(lease_dir: Path, identity: HostIdentity | None = None, **options: Any) -> LeaseTable:
    return LeaseTable(LeaseSettings(lease_dir=lease_dir, **options), identity or ME)


def _live_holder() -> dict[str, Any]:
    return ME.holder(os.getpid())


def _dead_holder() -> dict[str, Any]:
    """A holder on this host, boot and pid namespace whose process is gone."""
    return {**ME.holder(os.getpid()), "pid": DEAD_PID, "start": "1"}


def _remote_holder() -> dict[str, Any]:
    """A holder on another host: its pid means nothing here, only its heartbeat counts."""
    return {"pid": DEAD_PID, "start": "1", "host": "another-host", "boot_id": "other-boot", "pidns": "1"}


def _lease(lease_id: str, holder: dict[str, Any], heartbeat_at: float = NOW, **fields: Any) -> dict[str, Any]:
    return {
        "lease_id": lease_id,
        "devices": [0],
        "holder": holder,
        "acquired_at": heartbeat_at,
        "heartbeat_at": heartbeat_at,
        **fields,
    }


def _work(pid: int, pgid: int | None = None) -> dict[str, Any]:
    """The table's record of work process ``pid``."""
    return {"pid": pid, "start": process_start_token(pid), "pgid": pgid}


def _write(table: LeaseTable, leases: dict[str, Any]) -> None:
    table.dir.mkdir(parents=True, exist_ok=True)
    table.table_path.write_text(json.dumps({"version": 1, "leases": leases}))


def _stubborn(workers: list[subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
    """A child process (in this process's group) that ignores SIGTERM, as a trainer busy saving."""
    code = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('ready', flush=True); time.sleep(120)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    workers.append(proc)
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
    return proc


def _sleeper(workers: list[subprocess.Popen[bytes]], **popen: Any) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(["sleep", "120"], **popen)
    workers.append(proc)
    return proc


@contextlib.contextmanager
def _held_elsewhere(lease_dir: Path) -> Iterator[None]:
    """The table lock held by another thread (its own open of the lock file, as another worker's)."""
    taken, leave = threading.Event(), threading.Event()

    def hold() -> None:
        with _table(lease_dir).locked():
            taken.set()
            leave.wait(60)

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    assert taken.wait(30), "the other thread did not get the lock"
    try:
        yield
    finally:
        leave.set()
        holder.join(30)


# -- the lock ---------------------------------------------------------------------------------------
def test_locking_creates_the_lease_directory_and_is_released_when_the_body_raises(tmp_path: Path) -> None:
    table = _table(tmp_path / "a" / "leases")
    with pytest.raises(RuntimeError), table.locked():
        assert table.lock_path.is_file()
        raise RuntimeError("the allocation failed")
    with table.locked(timeout=0):  # free again at once: unlocked, and not marked held by this thread
        pass


def test_locking_the_table_again_in_the_same_thread_is_a_lease_error_not_a_deadlock(tmp_path: Path) -> None:
    # flock is not reentrant across two opens: a second lock by the holder (a signal handler that
    # interrupted it) would wait for itself forever
    table, twin = _table(tmp_path), _table(tmp_path)  # two views of one directory
    with table.locked():
        with pytest.raises(LeaseError, match="already locked by this thread"), twin.locked(timeout=5):
            pass
        with pytest.raises(LeaseError, match="already locked by this thread"), table.locked():
            pass
    with twin.locked(timeout=0):
        pass


def test_a_held_lock_times_out_naming_the_lock_file_and_how_to_find_its_holder(tmp_path: Path) -> None:
    table = _table(tmp_path)
    with _held_elsewhere(tmp_path), pytest.raises(LeaseTimeout) as err, table.locked(timeout=0):
        pass
    message = str(err.value)
    assert f"lock {table.lock_path} was held by another process" in message
    assert f"`fuser {table.lock_path}`" in message
    with table.locked(timeout=0):  # the timed-out attempt left nothing behind
        pass


def test_writers_that_hold_the_lock_lose_no_update(tmp_path: Path) -> None:
    """Four workers adding leases at once (each its own open of the lock): every lease is in the table."""
    rounds, errors = 15, []

    def writer(worker: int) -> None:
        table = _table(tmp_path)
        try:
            for i in range(rounds):
                with table.locked(timeout=60):
                    data = table.load()
                    data["leases"][f"w{worker}-{i}"] = _lease(f"w{worker}-{i}", _live_holder())
                    table.save(data)
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=writer, args=(worker,)) for worker in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors and not any(thread.is_alive() for thread in threads)
    table = _table(tmp_path)
    with table.locked():
        leases = table.load()["leases"]
    assert sorted(leases) == sorted(f"w{worker}-{i}" for worker in range(4) for i in range(rounds))


# -- load and save ----------------------------------------------------------------------------------
def test_without_a_table_file_the_table_is_empty_and_nothing_is_written(tmp_path: Path) -> None:
    table = _table(tmp_path)
    assert table.load() == {"version": 1, "leases": {}}
    assert list(tmp_path.iterdir()) == []


def test_a_saved_table_loads_back_unchanged_and_the_save_leaves_no_temporary_file(tmp_path: Path) -> None:
    table = _table(tmp_path)
    tmp_path.joinpath("notes.tmp").write_text("not ours")
    tmp_path.joinpath(".leases.json.crashed.tmp").write_text('{"half": ')  # a writer that crashed
    reclaiming = {
        "reason": "holder gone",
        "since": NOW,
        "since_mono": None,
        "boot_id": None,
        "signal": "SIGTERM",
    }
    data = {
        "version": 1,
        "leases": {
            "a": _lease("a", _live_holder(), uuids=["GPU-0"], ttl_s=None, owner=None, heartbeat_mono=12.5),
            "b": _lease(
                "b", _remote_holder(), uuids=[None], processes=[{"pid": 7, "pgid": 7}], reclaim=reclaiming
            ),
        },
    }
    with table.locked():
        table.save(data)
        assert table.load() == data
    assert sorted(p.name for p in tmp_path.iterdir()) == ["leases.json", "lock", "notes.tmp"]
    assert table.table_path.stat().st_mode & 0o777 == 0o664  # every worker of the host (a shared group)


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"", "Expecting value"),  # truncated to nothing
        (b"\0" * 64, "Expecting value"),  # a file system that zero-fills a file caught mid-write
        (b'{"version": 1, "leases": {"a": {"devices": [0], "hol', "Unterminated string"),
        (b'[{"version": 1, "leases": {}}]', "no 'leases' object"),
        (b'{"version": 1, "leases": []}', "no 'leases' object"),
        (b'{"version": 1}', "no 'leases' object"),
    ],
)
def test_an_empty_truncated_or_misshapen_table_file_is_a_corrupt_table(
    tmp_path: Path, content: bytes, reason: str
) -> None:
    table = _table(tmp_path)
    table.table_path.write_bytes(content)
    with pytest.raises(LeaseTableCorrupt, match="remove or repair") as err:
        table.load()
    assert reason in str(err.value) and str(table.table_path) in str(err.value)


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        # NaN or Infinity would never go stale, null would crash every allocation
        ({"heartbeat_at": float("nan")}, "'heartbeat_at' is not a number"),
        ({"ttl_s": float("inf")}, "'ttl_s' is not a number"),
        ({"heartbeat_mono": None}, "'heartbeat_mono' is not a number"),
        ({"acquired_at": True}, "'acquired_at' is not a number"),
        ({"ttl_s": 0}, "'ttl_s' 0 is not a positive number"),  # stale at once: a live holder's GPUs out
        ({"devices": [True]}, "'devices' is not a list of GPU indices"),
        ({"holder": {"pid": 0}}, "'holder' has no pid"),
        ({"holder": {"pid": 5, "boot_id": 7}}, "the holder's 'boot_id' is not a string"),
        ({"processes": [{"start": "1"}]}, "a recorded process has no pid"),
        ({"processes": [{"pid": 5, "pgid": 0}]}, "process 5 has a bad 'start' or 'pgid'"),
        ({"processes": [{"pid": 5, "start": 12}]}, "process 5 has a bad 'start' or 'pgid'"),
        ({"reclaim": {"signal": "SIGHUP"}}, "'reclaim' is not a reclaim in progress"),
        ({"reclaim": {"since": "yesterday"}}, "'reclaim' is not a reclaim in progress"),
    ],
)
def test_a_record_that_could_be_misread_makes_the_table_corrupt(
    tmp_path: Path, fields: dict[str, Any], reason: str
) -> None:
    table = _table(tmp_path)
    table.table_path.write_text(
        json.dumps({"version": 1, "leases": {"x": {**_lease("x", _live_holder()), **fields}}})
    )
    with pytest.raises(LeaseTableCorrupt) as err:
        table.load()
    assert f"lease 'x': {reason}" in str(err.value)


def test_a_table_file_of_bytes_that_are_not_utf8_is_a_corrupt_table_not_a_crash(tmp_path: Path) -> None:
    """Outside damage (a bad disk block, a binary written over it) must stop allocation as a corrupt table."""
    table = _table(tmp_path)
    table.table_path.write_bytes(b'\xff\xfe{"version": 1, "leases": {}}')
    with pytest.raises(LeaseTableCorrupt, match="remove or repair"):
        table.load()


def test_a_table_this_process_may_not_read_is_a_lease_error_naming_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another user's table is not damage: a LeaseError saying to fix access, not to remove the file."""
    table = _table(tmp_path)
    _write(table, {})
    read_bytes = Path.read_bytes

    def denied(path: Path) -> bytes:
        if path == table.table_path:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return read_bytes(path)

    monkeypatch.setattr(Path, "read_bytes", denied)
    with pytest.raises(LeaseError) as err:
        table.load()
    assert not isinstance(err.value, LeaseTableCorrupt)
    message = str(err.value)
    assert f"cannot read the GPU lease table in {tmp_path} ([gpu_dag] lease_dir)" in message
    assert "Fix: give the workers' user write access" in message


def test_a_save_that_fails_midway_leaves_the_old_table_whole_and_no_temporary_file(tmp_path: Path) -> None:
    table = _table(tmp_path)
    with table.locked():
        table.save({"version": 1, "leases": {"a": _lease("a", _live_holder())}})
        before = table.table_path.read_bytes()
        with pytest.raises(TypeError):  # dies while writing the new table: a set is not JSON
            table.save({"version": 1, "leases": {"b": _lease("b", _live_holder(), devices={0})}})
        assert table.table_path.read_bytes() == before
        assert list(table.load()["leases"]) == ["a"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["leases.json", "lock"]


@pytest.mark.parametrize(("step", "code"), [("mkstemp", errno.EACCES), ("replace", errno.EROFS)])
def test_a_lease_directory_that_cannot_be_written_is_a_lease_error_with_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str, code: int
) -> None:
    table = _table(tmp_path)
    with table.locked():
        table.save({"version": 1, "leases": {}})
    before = table.table_path.read_bytes()

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise OSError(code, os.strerror(code), str(tmp_path))

    if step == "mkstemp":
        monkeypatch.setattr(lease_table.tempfile, "mkstemp", refused)
    else:
        replace = os.replace
        monkeypatch.setattr(
            lease_table.os,
            "replace",
            lambda src, dst: refused() if Path(dst) == table.table_path else replace(src, dst),
        )
    with table.locked(), pytest.raises(LeaseError) as err:
        table.save({"version": 1, "leases": {"a": _lease("a", _live_holder())}})
    message = str(err.value)
    assert (
        f"cannot write the GPU lease table in {tmp_path} ([gpu_dag] lease_dir): {os.strerror(code)}"
        in message
    )
    assert "needs write access to the directory itself" in message
    assert table.table_path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["leases.json", "lock"]


def test_a_reader_never_sees_a_torn_table_while_a_writer_replaces_it(tmp_path: Path) -> None:
    """Even without the lock, a reader sees the old or the new table whole (atomic replace), in order."""
    writer, reader = _table(tmp_path), _table(tmp_path)
    done, errors = threading.Event(), []

    def write() -> None:
        try:
            for i in range(40):
                with writer.locked(timeout=60):
                    data = writer.load()
                    data["leases"][f"l{i}"] = _lease(f"l{i}", _live_holder(), owner={"task_id": "x" * 2000})
                    writer.save(data)
        except BaseException as err:
            errors.append(err)
        finally:
            done.set()

    thread = threading.Thread(target=write)
    thread.start()
    seen = []
    while not done.is_set():
        seen.append(len(reader.load()["leases"]))
    thread.join(60)
    assert not errors
    assert seen == sorted(seen) and len(reader.load()["leases"]) == 40


# -- staleness --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("record", "expected"),
    [
        (_lease("a", _live_holder()), None),
        (_lease("a", _dead_holder()), f"holder process {DEAD_PID} is gone"),
        (
            _lease("a", {**_live_holder(), "boot_id": "an-earlier-boot"}),
            "the host rebooted since the lease was taken",
        ),
        # another pid namespace or host: its pid is not ours to judge, only the heartbeat counts
        (_lease("a", {**_dead_holder(), "pidns": "another-namespace"}), None),
        (_lease("a", _remote_holder(), NOW - 119), None),
        (_lease("a", _remote_holder(), NOW - 200), "no heartbeat for 200s (lease_ttl 120s)"),
        (_lease("a", _remote_holder(), NOW - 200, ttl_s=300), None),  # the lease's own ttl wins
        (_lease("a", _remote_holder(), NOW - 400, ttl_s=300), "no heartbeat for 400s (lease_ttl 300s)"),
        (_lease("a", _remote_holder(), NOW - 200, ttl_s=None), "no heartbeat for 200s (lease_ttl 120s)"),
        # being reclaimed: stale whatever its holder and heartbeat say
        (
            _lease("a", _live_holder(), reclaim={"reason": "holder process 9 is gone"}),
            "holder process 9 is gone",
        ),
        (_lease("a", _live_holder(), reclaim={"reason": None}), "being reclaimed"),
    ],
    ids=[
        "live-holder",
        "dead-holder",
        "rebooted",
        "other-pidns",
        "remote-fresh",
        "remote-expired",
        "own-ttl-fresh",
        "own-ttl-expired",
        "ttl-from-settings",
        "reclaiming",
        "reclaiming-no-reason",
    ],
)
def test_stale_reason(tmp_path: Path, record: dict[str, Any], expected: str | None) -> None:
    assert _table(tmp_path, ttl_s=120).stale_reason(record, NOW) == expected


@pytest.mark.skipif(ME.boot_id is None, reason="needs a boot id (Linux)")
def test_on_the_holders_own_boot_the_heartbeat_is_aged_by_the_monotonic_clock(tmp_path: Path) -> None:
    table = _table(tmp_path, ttl_s=120)
    mono = time.monotonic()
    # the wall clock was stepped an hour forward: the monotonic heartbeat is fresh
    assert table.stale_reason(_lease("a", _live_holder(), NOW - 3600, heartbeat_mono=mono), NOW) is None
    # the wall clock was set back: the monotonic clock still sees the holder silent for 1000 s
    old = _lease("a", _live_holder(), NOW, heartbeat_mono=mono - 1000)
    assert (table.stale_reason(old, NOW) or "").startswith("no heartbeat for 100")
    # another host's monotonic clock means nothing here: its wall-clock heartbeat counts
    remote = _lease("a", _remote_holder(), NOW - 3600, heartbeat_mono=mono)
    assert table.stale_reason(remote, NOW) == "no heartbeat for 3600s (lease_ttl 120s)"


def test_time_spent_waiting_for_the_lock_is_not_held_against_a_heartbeat(tmp_path: Path) -> None:
    """Nobody could renew while the lock was held: a heartbeat 150 s old after a 100 s wait is 50 s old."""
    table = _table(tmp_path, ttl_s=120)
    record = _lease("a", _remote_holder(), NOW - 150)
    assert table.stale_reason(record, NOW) == "no heartbeat for 150s (lease_ttl 120s)"
    table.lock_waited = 100.0
    assert table.stale_reason(record, NOW) is None


def test_a_heartbeat_from_the_future_is_counted_from_now(tmp_path: Path) -> None:
    """The clock was set back: a dead holder's lease must not wait for the clock to catch up."""
    table = _table(tmp_path)
    data = {
        "leases": {
            "future": _lease("future", _remote_holder(), NOW + 3600),
            "past": _lease("past", _remote_holder(), NOW - 5),
            "none": {"devices": [1], "holder": {"pid": 3}},
        }
    }
    assert table.rebase_future_heartbeats(data, NOW) is True
    assert {k: r.get("heartbeat_at") for k, r in data["leases"].items()} == {
        "future": NOW,
        "past": NOW - 5,
        "none": None,
    }
    assert data["leases"]["future"]["acquired_at"] == NOW + 3600  # only the heartbeat moves
    assert table.rebase_future_heartbeats(data, NOW) is False


# -- the work of a lease ----------------------------------------------------------------------------
def test_running_work_is_the_recorded_groups_and_processes_that_still_run(
    tmp_path: Path, workers: list[subprocess.Popen[bytes]]
) -> None:
    table = _table(tmp_path)
    session = _sleeper(workers, start_new_session=True)  # a bash command's session: pgid == pid
    single = _sleeper(workers)  # in this process's group: recorded as a process only
    gone = subprocess.Popen(["true"])
    gone.wait()
    record = _lease(
        "a",
        _dead_holder(),
        processes=[
            _work(session.pid, session.pid),
            _work(single.pid, os.getpgid(single.pid)),
            {"pid": gone.pid, "start": "1", "pgid": gone.pid},  # exited, its group empty
            {"pid": DEAD_PID, "start": None, "pgid": None},
        ],
    )
    assert table.running_work(f"lease-{uuid.uuid4().hex}", record) == ([session.pid], [single.pid])
    # the same pid with another start time is another process that reused it: not the lease's work
    reused = _lease(
        "a",
        _dead_holder(),
        processes=[{"pid": p.pid, "start": "1", "pgid": p.pid} for p in (session, single)],
    )
    assert table.running_work(f"lease-{uuid.uuid4().hex}", reused) == ([], [])


@pytest.mark.parametrize(
    "holder",
    [
        _remote_holder(),
        {**_dead_holder(), "pidns": "another-namespace"},
        {**_dead_holder(), "boot_id": "an-earlier-boot"},
    ],
)
def test_the_work_of_a_lease_held_in_another_host_namespace_or_boot_is_never_looked_for(
    tmp_path: Path, workers: list[subprocess.Popen[bytes]], holder: dict[str, Any]
) -> None:
    """Its pids mean other processes here: signalling them would kill strangers."""
    lease_id = f"lease-{uuid.uuid4().hex}"
    work = _sleeper(workers, start_new_session=True, env={**os.environ, LEASE_ENV: lease_id})
    record = _lease("a", holder, processes=[_work(work.pid, work.pid)])
    assert _table(tmp_path).running_work(lease_id, record) == ([], [])


def test_processes_started_with_the_lease_environment_are_its_work_unless_older_than_its_holder(
    tmp_path: Path, workers: list[subprocess.Popen[bytes]]
) -> None:
    lease_id = f"lease-{uuid.uuid4().hex}"
    left = _sleeper(
        workers, start_new_session=True, env={**os.environ, LEASE_ENV: lease_id}
    )  # left its group
    _sleeper(workers, env={**os.environ, LEASE_ENV: f"lease-{uuid.uuid4().hex}"})  # another lease's
    table = _table(tmp_path)
    assert table.running_work(lease_id, _lease("a", _dead_holder())) == ([], [left.pid])
    # a holder that started after the process (clock ticks since boot): the process is not its work
    later = {**_dead_holder(), "start": str(10**15)}
    assert table.running_work(lease_id, _lease("a", later)) == ([], [])


# -- stopping the work and reclaiming ---------------------------------------------------------------
def test_stopping_a_lease_with_no_work_left_frees_it_at_once_unmarked(tmp_path: Path) -> None:
    record = _lease("a", _dead_holder(), processes=[{"pid": DEAD_PID, "start": None, "pgid": DEAD_PID}])
    assert _table(tmp_path).stop_work("a", record, "holder gone") is True
    assert "reclaim" not in record


def test_stopping_stubborn_work_marks_the_lease_sends_sigterm_then_sigkill_after_the_grace(
    tmp_path: Path, workers: list[subprocess.Popen[bytes]]
) -> None:
    table = _table(tmp_path, reclaim_grace_s=0)
    work = _stubborn(workers)
    record = _lease("a", _dead_holder(), processes=[_work(work.pid)])
    assert table.stop_work("a", record, "holder gone") is False  # SIGTERM, ignored
    state = record["reclaim"]
    assert (state["reason"], state["signal"], state["boot_id"]) == ("holder gone", "SIGTERM", ME.boot_id)
    assert work.poll() is None
    assert table.stop_work("a", record, "holder gone") is True  # the grace (0 s) is over: SIGKILL
    assert record["reclaim"]["signal"] == "SIGKILL"
    assert work.wait(10) == -signal.SIGKILL


@pytest.mark.skipif(ME.boot_id is None, reason="needs a boot id (Linux)")
def test_the_grace_before_sigkill_is_measured_on_the_monotonic_clock_of_the_boot_it_began_on(
    tmp_path: Path, workers: list[subprocess.Popen[bytes]]
) -> None:
    table = _table(tmp_path, reclaim_grace_s=10)
    work = _stubborn(workers)
    record = _lease("a", _dead_holder(), processes=[_work(work.pid)])
    # SIGTERM sent just now by the monotonic clock, though the wall clock (stepped) says 1000 s ago
    record["reclaim"] = {
        "reason": "holder gone",
        "since": time.time() - 1000,
        "since_mono": time.monotonic(),
        "boot_id": ME.boot_id,
        "signal": "SIGTERM",
    }
    assert table.stop_work("a", record, "holder gone") is False
    assert record["reclaim"]["signal"] == "SIGTERM" and work.poll() is None
    record["reclaim"]["boot_id"] = (
        "an-earlier-boot"  # begun on another boot: only the wall clock means anything
    )
    assert table.stop_work("a", record, "holder gone") is True
    assert work.wait(10) == -signal.SIGKILL


def test_this_process_recorded_as_a_leases_work_keeps_its_devices_held(tmp_path: Path) -> None:
    """stop_work: this process is never signalled, and counts as running: the devices stay held."""
    table = _table(tmp_path, kill_orphans=False)  # whatever the outcome, nothing is signalled
    data = {"version": 1, "leases": {"a": _lease("a", _dead_holder(), processes=[_work(os.getpid())])}}
    reclaimed, _ = table.sweep(data, NOW)
    assert reclaimed == [] and list(data["leases"]) == ["a"]


def test_a_sweep_reclaims_stale_leases_in_table_order_and_charges_them_up_to_their_last_heartbeat(
    tmp_path: Path,
) -> None:
    table = _table(tmp_path, ttl_s=120)
    owner = {"dag_id": "d", "run_id": "r", "task_id": "t", "try_number": 2, "pool": "gpu_a100"}
    dead = _lease("dead", _dead_holder(), devices=[0, 1], owner=owner)
    dead.update(acquired_at=NOW - 1000, heartbeat_at=NOW - 400)
    expired = _lease("expired", _remote_holder(), NOW - 500, devices=[3])
    data = {
        "version": 1,
        "leases": {"dead": dead, "live": _lease("live", _live_holder(), devices=[2]), "expired": expired},
    }
    reclaimed, changed = table.sweep(data, NOW)
    assert changed is True
    assert [(r["lease_id"], r["reclaim_reason"]) for r in reclaimed] == [
        ("dead", f"holder process {DEAD_PID} is gone"),
        ("expired", "no heartbeat for 500s (lease_ttl 120s)"),
    ]
    assert list(data["leases"]) == ["live"]
    assert not table.table_path.exists()  # the caller saves
    first, second = table.ledger.read()
    assert (first.lease_id, first.outcome, first.devices, first.start, first.end) == (
        "dead",
        "reclaimed",
        (0, 1),
        NOW - 1000,
        NOW - 400,
    )
    assert first.gpu_seconds == 1200.0
    assert (first.dag_id, first.run_id, first.task_id, first.try_number, first.pool, first.map_index) == (
        "d",
        "r",
        "t",
        2,
        "gpu_a100",
        -1,
    )
    assert first.host == ME.host and first.extra == {"reclaim_reason": f"holder process {DEAD_PID} is gone"}
    assert (second.lease_id, second.host, second.dag_id, second.start, second.end) == (
        "expired",
        "another-host",
        None,
        NOW - 500,
        NOW - 500,
    )


def test_a_sweep_with_nothing_stale_changes_nothing(tmp_path: Path) -> None:
    table = _table(tmp_path)
    data = {
        "version": 1,
        "leases": {"live": _lease("live", _live_holder()), "remote": _lease("remote", _remote_holder())},
    }
    before = json.dumps(data, sort_keys=True)
    assert table.sweep(data, NOW) == ([], False)
    assert table.reclaim(data, NOW) == []
    assert json.dumps(data, sort_keys=True) == before and table.ledger.read() == []


def test_a_stale_lease_whose_work_runs_stays_marked_until_the_work_is_gone(
    tmp_path: Path, workers: list[subprocess.Popen[bytes]]
) -> None:
    table = _table(tmp_path, kill_orphans=False)
    work = _sleeper(workers)
    data = {"version": 1, "leases": {"a": _lease("a", _dead_holder(), processes=[_work(work.pid)])}}
    assert table.sweep(data, NOW) == ([], True)  # marked: save it
    reason = f"holder process {DEAD_PID} is gone"
    assert (
        data["leases"]["a"]["reclaim"]["reason"] == reason
        and data["leases"]["a"]["reclaim"]["signal"] is None
    )
    assert table.sweep(data, NOW) == ([], False)  # nothing new: no save needed
    assert work.poll() is None  # kill_orphans off: never signalled
    work.kill()
    work.wait(10)
    (reclaimed,) = table.reclaim(data, NOW)
    assert reclaimed["reclaim_reason"] == reason and "reclaim" not in reclaimed
    assert data["leases"] == {}
    assert [r.outcome for r in table.ledger.read()] == ["reclaimed"]


def test_a_recorded_process_group_no_pid_can_have_is_gone_not_a_crash(tmp_path: Path) -> None:
    table = _table(tmp_path)
    huge = 2**40
    _write(table, {"x": _lease("x", _dead_holder(), processes=[{"pid": huge, "start": None, "pgid": huge}])})
    with table.locked():
        try:
            data = table.load()
        except LeaseTableCorrupt:
            return  # refused as damage: a fix too
        reclaimed, changed = table.sweep(data, NOW)
    assert [r["lease_id"] for r in reclaimed] == ["x"] and changed


def test_a_usage_ledger_that_cannot_be_written_is_logged_not_raised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Losing a usage line must not fail the release or reclaim that frees the devices."""
    ledger = tmp_path / "ledger"
    ledger.mkdir()  # a directory where the ledger file should be
    table = LeaseTable(LeaseSettings(lease_dir=tmp_path / "leases", usage_ledger=ledger), ME)
    with caplog.at_level(logging.ERROR, logger="airflow_gpu_dag.gpu.lease_table"):
        table.record_usage(_lease("a", _live_holder()), NOW + 10, "success")
    assert [r.getMessage() for r in caplog.records] == [f"GPU usage ledger {ledger} cannot be written"]


def test_group_exists(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert group_exists(os.getpgid(0))
    leader = subprocess.Popen(["true"], start_new_session=True)
    leader.wait()  # reaped: its group has no process left
    assert not group_exists(leader.pid)

    def not_ours(pgid: int, sig: int) -> None:
        raise PermissionError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "killpg", not_ours)
    assert group_exists(leader.pid)  # another user's group: it exists
