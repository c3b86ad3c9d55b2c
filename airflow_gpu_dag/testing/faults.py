"""Fault injection for a running :class:`~airflow_gpu_dag.testing.cluster.AirflowCluster`: crash a
component (``kill -9`` of its main process, or a clean stop) and start it again, as a supervisor
(systemd, Kubernetes) would::

    from airflow_gpu_dag.testing import AirflowCluster
    from airflow_gpu_dag.testing.faults import restart_component

    with AirflowCluster(dags, triggerer=True) as cluster:
        ...
        took = restart_component(cluster, "scheduler")             # kill -9, start, wait until it heartbeats
        took = restart_component(cluster, "api-server", sig=signal.SIGTERM)   # a clean restart

Only the component's main process gets the signal (a crash, not a group kill). Before the new process
starts, what is left of the old process tree (a scheduler's LocalExecutor workers and the tasks they
run) is killed, as systemd (``KillMode=control-group``) or a container runtime does before restarting a
crashed service; ``leftovers="keep"`` skips that. The old processes stay tracked, so
:meth:`AirflowCluster.stop` still kills all of them. The new process logs to the same
``<home>/<component>.log``.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
from datetime import datetime

import psutil

from airflow_gpu_dag.testing.cluster import AirflowCluster
from airflow_gpu_dag.testing.errors import ClusterError
from airflow_gpu_dag.testing.processes import Component, alive

__all__ = [
    "HEALTH_KEYS",
    "component",
    "dead_components",
    "kill_component",
    "reap_component",
    "restart_component",
    "start_component",
]

#: The ``/monitor/health`` entry and its heartbeat field of each component that has one.
HEALTH_KEYS = {
    "scheduler": ("scheduler", "latest_scheduler_heartbeat"),
    "dag-processor": ("dag_processor", "latest_dag_processor_heartbeat"),
    "triggerer": ("triggerer", "latest_triggerer_heartbeat"),
}


def component(cluster: AirflowCluster, name: str) -> Component:
    """The running (latest started) process of component ``name``."""
    comp = cluster._components.latest().get(name)
    if comp is None or comp.proc is None:
        raise ClusterError(f"the cluster has no component {name!r}; it has {sorted(cluster.pids)}")
    return comp


def dead_components(cluster: AirflowCluster) -> dict[str, int]:
    """Components whose latest process has exited (on its own: a killed one is replaced by
    :func:`start_component`), with their exit status."""
    return {
        name: int(comp.proc.returncode)
        for name, comp in cluster._components.latest().items()
        if comp.proc is not None and comp.proc.poll() is not None
    }


def kill_component(
    cluster: AirflowCluster,
    name: str,
    sig: signal.Signals = signal.SIGKILL,
    *,
    group: bool = False,
    grace: float = 60.0,
) -> int:
    """Send ``sig`` to the main process of ``name`` (``group``: to its whole process group, as a service
    manager stopping it would) and wait until it has exited; after ``grace`` seconds the group gets
    SIGKILL. Returns the pid."""
    comp = component(cluster, name)
    assert comp.proc is not None
    comp.stopped_on_purpose = True
    comp.remember_descendants()
    if group:
        comp.signal_group(sig)
    else:
        comp.proc.send_signal(sig)
    try:
        comp.proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        comp.signal_group(signal.SIGKILL)
        comp.proc.wait(timeout=30)
    if group:  # a clean stop leaves nothing of the group behind (a port held by a child, ...)
        deadline = time.monotonic() + grace
        while any(alive(p) for p in comp.seen.values()) and time.monotonic() < deadline:
            time.sleep(0.2)
        comp.signal_group(signal.SIGKILL)
    return comp.proc.pid


def start_component(cluster: AirflowCluster, name: str, timeout: float = 300.0) -> float:
    """Start ``name`` again with the argv it was started with and wait until it is healthy (the
    api-server: answers ``/monitor/health`` and its Execution API; a component with a heartbeat: a
    heartbeat newer than this call). Returns the seconds that took.

    :raises ClusterError: not healthy within ``timeout``; the message has the component's log tail.
    """
    old = component(cluster, name)
    if old.proc is not None and old.proc.poll() is None:
        raise ClusterError(f"{name} (pid {old.proc.pid}) is still running; kill it first")
    started = time.monotonic()
    since = time.time()
    new = cluster._restart(name)
    deadline = started + timeout
    last: object = None
    while time.monotonic() < deadline:
        assert new.proc is not None
        if new.proc.poll() is not None:
            raise ClusterError(
                f"{name} exited with status {new.proc.returncode} after the restart:\n{cluster.log_tails(40)}"
            )
        try:
            health = cluster.health()
            last = health
            if _healthy(name, health, since):
                if name == "api-server":
                    cluster._warm_up_execution_api()
                return time.monotonic() - started
        except (ClusterError, ValueError) as err:
            last = err
        time.sleep(0.5)
    raise ClusterError(
        f"{name} not healthy {timeout:.0f}s after the restart; last health: {last}\n{cluster.log_tails(40)}"
    )


def restart_component(
    cluster: AirflowCluster,
    name: str,
    *,
    sig: signal.Signals = signal.SIGKILL,
    group: bool = False,
    down_for: float = 0.0,
    leftovers: str = "kill",
    timeout: float = 300.0,
) -> float:
    """:func:`kill_component` with ``sig`` (and ``group``), wait ``down_for`` seconds, then, with
    ``leftovers="kill"`` (the default), kill what is left of the old process tree (:func:`reap_component`,
    what systemd or a container runtime does before it restarts a crashed service), and
    :func:`start_component`. Returns the seconds from the signal until the new process is healthy.

    ``leftovers="keep"`` starts the new process next to the old one's children. With a scheduler that
    is not what happens in production, and it shows why: its LocalExecutor workers, forked from it, keep
    its database connection open, so PostgreSQL keeps the dead scheduler's ``SELECT ... FOR UPDATE`` locks
    on the DAG runs it was examining, and the new scheduler skips those runs (``SKIP LOCKED``) for ever.
    """
    if leftovers not in ("kill", "keep"):
        raise ValueError(f"leftovers must be 'kill' or 'keep', not {leftovers!r}")
    started = time.monotonic()
    kill_component(cluster, name, sig, group=group)
    if down_for > 0:
        time.sleep(down_for)
    if leftovers == "kill":
        reap_component(cluster, name)
    start_component(cluster, name, timeout=timeout)
    return time.monotonic() - started


def reap_component(cluster: AirflowCluster, name: str, timeout: float = 30.0) -> int:
    """SIGKILL what is left of the (dead) latest process of ``name``: its process group and every
    descendant seen of it (task supervisors leave the group). Returns how many processes were killed."""
    comp = component(cluster, name)
    # Counted before the group kill: after it, a loaded machine may already have taken them.
    left = [p for p in comp.seen.values() if alive(p)]
    comp.signal_group(signal.SIGKILL)
    for proc in left:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(left, timeout=timeout)
    return len(left)


def _healthy(name: str, health: dict[str, object], since: float) -> bool:
    if name == "api-server":
        return True  # it answered
    key, field = HEALTH_KEYS.get(name, (name.replace("-", "_"), ""))
    entry = health.get(key)
    if not isinstance(entry, dict) or entry.get("status") != "healthy":
        return False
    beat = entry.get(field) if field else None
    if not isinstance(beat, str):
        return not field
    return datetime.fromisoformat(beat.replace("Z", "+00:00")).timestamp() > since
