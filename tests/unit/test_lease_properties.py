"""Property test: random acquire/release/crash sequences never give a device twice or exceed the inventory."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, settings
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
TestLeaseProperties = LeaseMachine.TestCase
