"""The processes of a test cluster: each component in its own process group, every descendant seen
while it runs remembered, and all of them stopped (SIGTERM, then SIGKILL) and nothing else."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import psutil

__all__ = ["Component", "Components", "alive", "free_port"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def alive(proc: psutil.Process) -> bool:
    """True while ``proc`` runs (a zombie counts as gone)."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


@dataclass
class Component:
    """One started process (``api-server``, ``scheduler``, ...) and the descendants seen of it."""

    name: str
    argv: list[str]
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    log_file: IO[bytes] | None = None
    seen: dict[int, psutil.Process] = field(default_factory=dict)
    #: Set before the harness stops or kills the process on purpose (a fault, the cluster's stop):
    #: its exit is then expected, not a crash.
    stopped_on_purpose: bool = False

    def remember_descendants(self) -> None:
        """Record the process and its descendants now alive (so a stop also finds those that left
        the process group). Not once the process has exited: its pid, free again, may be another's now."""
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            root = psutil.Process(self.proc.pid)
            self.seen.setdefault(root.pid, root)
            for child in root.children(recursive=True):
                self.seen.setdefault(child.pid, child)
        except psutil.Error:
            pass

    def signal_group(self, sig: signal.Signals) -> None:
        """Send ``sig`` to the component's process group. Once the (reaped) leader's pid is another
        process's, the group is gone: while a group has members, Linux does not reuse its id."""
        if self.proc is None or (self.proc.poll() is not None and psutil.pid_exists(self.proc.pid)):
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)


class Components:
    """The components a cluster started, in start order."""

    def __init__(self) -> None:
        self.items: list[Component] = []

    def __iter__(self) -> Iterator[Component]:
        return iter(self.items)

    def spawn(
        self, name: str, argv: list[str], env: Mapping[str, str], cwd: Path, log_path: Path
    ) -> Component:
        """Start ``argv`` in its own process group (session), stdout and stderr appended to ``log_path``."""
        comp = Component(name=name, argv=argv, log_path=log_path)
        self.items.append(comp)
        comp.log_file = open(comp.log_path, "ab")  # noqa: SIM115 - closed in stop()
        comp.proc = subprocess.Popen(
            comp.argv,
            env=dict(env),
            cwd=str(cwd),
            stdin=subprocess.DEVNULL,
            stdout=comp.log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # own process group: stop() kills exactly this group
        )
        return comp

    @property
    def pids(self) -> dict[str, int]:
        """``component name -> pid`` (also the process group id)."""
        return {c.name: c.proc.pid for c in self.items if c.proc is not None}

    def exited(self) -> Component | None:
        """The first component whose process has exited, remembering the others' descendants."""
        for comp in self.items:
            if comp.proc is not None and comp.proc.poll() is not None:
                return comp
            comp.remember_descendants()
        return None

    def latest(self) -> dict[str, Component]:
        """``name -> the latest process started under that name`` (a restart adds one), in start order."""
        return {comp.name: comp for comp in self.items}

    def died(self) -> Component | None:
        """The first component whose latest process exited without the harness stopping it (a crash
        or an exit of its own); None while every one runs or was stopped on purpose."""
        for comp in self.latest().values():
            if not comp.stopped_on_purpose and comp.proc is not None and comp.proc.poll() is not None:
                return comp
        return None

    def process_tree(self) -> list[psutil.Process]:
        """Every live process started: the components and their descendants."""
        out: list[psutil.Process] = []
        for comp in self.items:
            comp.remember_descendants()
            out.extend(p for p in comp.seen.values() if alive(p))
        return out

    def stop(self, grace: float) -> None:
        """SIGTERM every process group, SIGKILL what is left after ``grace`` seconds, then the same
        for descendants that left their group (task supervisors call ``setpgid``); close the logs."""
        for comp in self.items:
            comp.stopped_on_purpose = True
            comp.remember_descendants()
        # The scheduler first (it stops queuing work), the api-server last (workers report to it).
        order = sorted(self.items, key=lambda c: c.name == "api-server")
        for comp in order:
            comp.signal_group(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for comp in order:
            if comp.proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    comp.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        for comp in order:
            if comp.proc is not None and (
                comp.proc.poll() is None or any(alive(p) for p in comp.seen.values())
            ):
                comp.signal_group(signal.SIGKILL)
            if comp.proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    comp.proc.wait(timeout=10)
        leftovers = [p for comp in order for p in comp.seen.values() if alive(p)]
        for proc in leftovers:
            with contextlib.suppress(psutil.Error):
                proc.terminate()
        _, still = psutil.wait_procs(leftovers, timeout=3)
        for proc in still:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(still, timeout=3)
        for comp in self.items:
            if comp.log_file is not None:
                comp.log_file.close()
