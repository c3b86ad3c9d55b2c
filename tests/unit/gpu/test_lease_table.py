"""Property tests of the lease table: random acquire/release/crash sequences never give a device twice or
exceed the inventory; arbitrary and damaged lease records never crash it nor free a device whose holder
is alive or unknown."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, cast

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from airflow_gpu_dag.core.model.resources import GpuRequest
from airflow_gpu_dag.gpu.inventory import GpuDevice, GpuInventory
from airflow_gpu_dag.gpu.lease import Lease, LeaseManager, LeaseSettings

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
