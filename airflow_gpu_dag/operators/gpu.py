"""Operators for GPU tasks on a local GPU host (LocalExecutor box, Celery GPU workers).

``GpuBashOperator`` runs a command and ``GpuPythonOperator`` a callable on exactly the GPUs the task
asked for::

    from airflow_gpu_dag.operators.gpu import GpuBashOperator

    train = GpuBashOperator(
        task_id="train",
        bash_command="python train.py --devices $CUDA_VISIBLE_DEVICES",
        gpus=4,
        gpu_memory="80GiB",
        gpu_type="a100",
        duration="1h30m",
        retries=2,
    )

At parse time the operator checks the request (clear error naming the task and the fix), and sets:

* ``pool``: one pool per GPU type: ``gpu_default`` (any GPU) or ``gpu_<type>``; pass ``pool=`` to
  override;
* ``pool_slots``: the GPU count, so the pool counts GPUs;
* ``executor_config``: the provider's hints (:func:`airflow_gpu_dag.executor_config.gpu_hints`: duration,
GPUs,
  memory, type, inputs/outputs), which survive DAG serialization for the critical-path priority.

The parse-time checks and derivations are in :mod:`airflow_gpu_dag.operators.gpu_spec` (re-exported
here); the lease handling shared by both operators in :mod:`airflow_gpu_dag.operators.gpu_lease`.

At run time it leases concrete devices of the worker's host (:mod:`airflow_gpu_dag.gpu.lease`),
exports ``CUDA_VISIBLE_DEVICES``/``NVIDIA_VISIBLE_DEVICES`` to the work, heartbeats the lease, and
releases it on success, failure and SIGTERM (``on_kill``). A killed worker's lease is reclaimed.
"""

from __future__ import annotations

import _thread
import contextlib
import functools
import os
import signal
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

import psutil
from airflow.providers.standard.hooks.subprocess import SubprocessHook
from airflow.providers.standard.operators.bash import BashOperator
from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk.exceptions import AirflowException, AirflowSkipException

from airflow_gpu_dag.gpu.lease import Lease
from airflow_gpu_dag.gpu.lease_table import group_exists
from airflow_gpu_dag.gpu.process import own_process_group, process_start_token
from airflow_gpu_dag.operators.gpu_lease import GpuLeaseMixin
from airflow_gpu_dag.operators.gpu_spec import (
    GpuTaskError,
    GpuTaskSpec,
    gpu_scheduling_kwargs,
    parse_time_inventory,
    resolve_gpu_task,
)

__all__ = [
    "GpuBashOperator",
    "GpuPythonOperator",
    "GpuTaskError",
    "GpuTaskSpec",
    "gpu_scheduling_kwargs",
    "parse_time_inventory",
    "resolve_gpu_task",
]

#: Keys of ``context`` the Python variant adds: the lease as a dict (devices, lease_id, ...).
LEASE_CONTEXT_KEY = "gpu_lease"


class GpuBashOperator(GpuLeaseMixin, BashOperator):
    """A :class:`BashOperator` that runs its command on leased GPUs of the worker's host.

    :param gpus: whole GPUs (>= 1); also the task's ``pool_slots``.
    :param gpu_memory: free memory needed on each GPU (``"80GiB"``, ``"80G"``, int MiB).
    :param gpu_type: GPU family (``"a100"``); None = any. Selects pool ``gpu_<type>``.
    :param duration: estimated run time (``"1h30m"``) for critical-path planning.
    :param lease_timeout: how long to wait for free devices at run time (default
        ``[gpu_dag] lease_wait_timeout``).
    :param inputs: dataset paths the task reads (hidden-dependency checks).
    :param outputs: dataset paths the task writes.

    Every other argument is the BashOperator's (``pool`` overrides the GPU pool).
    """

    custom_operator_name = "GpuBashOperator"
    ui_color = "#c9e4c5"

    def __init__(
        self,
        *,
        bash_command: Any,
        gpus: int = 1,
        gpu_memory: object = None,
        gpu_type: str | None = None,
        duration: object = None,
        lease_timeout: object = None,
        inputs: Iterable[str] = (),
        outputs: Iterable[str] = (),
        **kwargs: Any,
    ) -> None:
        spec = self._resolve_gpu_kwargs(
            kwargs,
            gpus=gpus,
            gpu_memory=gpu_memory,
            gpu_type=gpu_type,
            duration=duration,
            lease_timeout=lease_timeout,
            inputs=inputs,
            outputs=outputs,
        )
        super().__init__(bash_command=bash_command, **kwargs)
        self.gpu_request = spec.request
        self.lease_timeout = spec.lease_timeout_s

    @functools.cached_property
    def subprocess_hook(self) -> SubprocessHook:
        """A SubprocessHook that records the command's process in the lease when it starts."""
        return _LeasedSubprocessHook(self._register_work_process)

    def _register_work_process(self, pid: int) -> None:
        if self._gpu_lease is not None:
            try:
                self._gpu_lease.register_process(pid)
            except Exception:
                self.log.exception("GPU lease: cannot record process %s", pid)
        lost = self._gpu_lease is not None and self._gpu_lease.lost
        if self._gpu_cancelled or lost:  # SIGTERM or a reclaim between get_env and the start: stop it
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGTERM)

    def get_env(self, context: Any) -> dict:
        if self._gpu_cancelled:  # SIGTERM between the lease and the command: do not start it
            raise AirflowException(f"task {self.task_id!r} was killed before its GPU command started")
        self._raise_if_lost()  # reclaimed before the command started: its GPUs may be another task's now
        env = super().get_env(context)
        if self._gpu_lease is not None:
            env.update(self._gpu_lease.env())
        return env

    #: Seconds the command gets to exit after SIGTERM (then SIGKILL) when execute ends while it runs.
    command_stop_grace_s: float = 10.0

    def execute(self, context: Any) -> Any:
        self._acquire_gpu_lease(context)
        outcome = "failed"
        try:
            result = super().execute(context)
            self._raise_if_lost()
            outcome = "success"
            return result
        except AirflowSkipException:
            outcome = "skipped"
            raise
        except BaseException:
            self._raise_if_lost()
            raise
        finally:
            # execute can end while the command still runs: Airflow raises execution_timeout's
            # AirflowTaskTimeout in here and calls on_kill only after. Its GPUs are given back only
            # once it is gone, or another task would be handed GPUs it still uses.
            if self._stop_command():
                self._finish_gpu_lease(outcome)
            else:
                self._leave_lease_to_reclaim()

    def _stop_command(self) -> bool:
        """True once the command's whole process group is gone: SIGTERM, then SIGKILL, to the group
        (the command runs in its own session, so its pid is the group's id). Not only its leader: a
        shell that has exited can leave a child still writing a checkpoint on the GPUs. False when the
        group survives both signals."""
        proc = self.subprocess_hook.sub_process
        if proc is None or _group_gone(proc, 0.0):
            return True
        for sig, wait in ((signal.SIGTERM, self.command_stop_grace_s), (signal.SIGKILL, 5.0)):
            self.log.warning(
                "GPU task command %s (process group) still running; sending %s", proc.pid, sig.name
            )
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, sig)
            if _group_gone(proc, wait):
                return True
        return False

    def _on_lease_lost(self, lease: Lease) -> None:
        try:
            self.subprocess_hook.send_sigterm()
        except Exception:
            self.log.exception("GPU lease lost: cannot stop the command")

    def on_kill(self) -> None:
        """SIGTERM: stop the command, wait briefly for it to exit, then give the GPUs back.

        If the command does not exit in time the lease stays until this process dies; it is then
        reclaimed and the command's process group killed.
        """
        self._gpu_cancelled = True
        proc = self.subprocess_hook.sub_process
        if proc is None:
            # no command yet: it will not start (get_env, the hook), and execute gives the lease back;
            # released here, its devices could go to another task while this one starts its command
            return
        if self._stop_command():
            self._finish_gpu_lease("killed")
        else:
            self._leave_lease_to_reclaim()


class _LeasedSubprocessHook(SubprocessHook):
    """Reports the pid of each command it starts (``sub_process`` is assigned right after Popen)."""

    def __init__(self, on_start: Any) -> None:
        self._on_start = on_start
        self._proc: Any = None
        super().__init__()

    @property  # type: ignore[override]
    def sub_process(self) -> Any:
        return self._proc

    @sub_process.setter
    def sub_process(self, value: Any) -> None:
        self._proc = value
        if value is not None and getattr(value, "pid", None):
            self._on_start(value.pid)


def _group_gone(proc: Any, wait: float) -> bool:
    """Wait up to ``wait`` seconds for the command's leader to exit (reaping it) and its process group
    to be empty; True once both are."""
    deadline = time.monotonic() + wait
    while True:
        if proc.poll() is not None and not group_exists(proc.pid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def _descendants(root: int) -> dict[int, str]:
    """Every running (not zombie) descendant of process ``root``: pid -> start token."""
    try:
        children = psutil.Process(root).children(recursive=True)
    except psutil.Error:
        return {}
    tokens = {child.pid: process_start_token(child.pid) for child in children}
    return {pid: token for pid, token in tokens.items() if token is not None}


def _processes_gone(processes: dict[int, str], wait: float) -> bool:
    """Wait up to ``wait`` seconds until none of ``processes`` (pid -> start token) runs; True then."""
    deadline = time.monotonic() + wait
    while True:
        if all(process_start_token(pid) != token for pid, token in processes.items()):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


@contextlib.contextmanager
def _sigint_raises() -> Iterator[bool]:
    """While the block runs in the main thread, SIGINT raises ``KeyboardInterrupt``; yields whether it does.

    Airflow's task process sets SIGINT to ``SIG_DFL``, and ``_thread.interrupt_main()`` does nothing
    for a signal Python does not handle: without this a lost lease could not stop the callable, which
    would keep using GPUs already handed to another task. The previous handler is restored after.
    """
    if threading.current_thread() is not threading.main_thread():
        yield False
        return
    previous = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield True
    finally:
        if previous is not None:  # None: a handler not installed from Python; leave ours
            signal.signal(signal.SIGINT, previous)


class GpuPythonOperator(GpuLeaseMixin, PythonOperator):
    """A :class:`PythonOperator` whose callable runs with leased GPUs (``@task.gpu`` uses it).

    While the callable runs, ``os.environ`` has ``CUDA_VISIBLE_DEVICES``/``NVIDIA_VISIBLE_DEVICES`` set
    to the leased devices (import/initialise CUDA inside the callable, not at module level). A callable
    with a ``gpu_lease=None`` parameter receives the lease as a dict (``devices``, ``lease_id``, ...).
    Same GPU parameters as :class:`GpuBashOperator`.
    """

    custom_operator_name = "GpuPythonOperator"
    ui_color = "#c9e4c5"

    def __init__(
        self,
        *,
        gpus: int = 1,
        gpu_memory: object = None,
        gpu_type: str | None = None,
        duration: object = None,
        lease_timeout: object = None,
        inputs: Iterable[str] = (),
        outputs: Iterable[str] = (),
        **kwargs: Any,
    ) -> None:
        spec = self._resolve_gpu_kwargs(
            kwargs,
            gpus=gpus,
            gpu_memory=gpu_memory,
            gpu_type=gpu_type,
            duration=duration,
            lease_timeout=lease_timeout,
            inputs=inputs,
            outputs=outputs,
        )
        super().__init__(**kwargs)
        self.gpu_request = spec.request
        self.lease_timeout = spec.lease_timeout_s
        self._gpu_running = False
        self._gpu_interruptible = False

    #: Seconds the processes the callable left running get to exit after SIGTERM (then SIGKILL).
    child_stop_grace_s: float = 10.0

    def _lease_work_groups(self) -> tuple[int, ...]:
        """The task process's own process group, recorded in the lease as it is taken: every process the
        callable starts (torchrun, DataLoader workers, multiprocessing) is in it from its first
        instant, so a reclaim after this process is killed with -9 stops them before the GPUs are
        leased again. Airflow's Task SDK supervisor makes each task process lead a group of its own; a
        process that does not (``dag.test()``) shares its group with others and records none."""
        group = own_process_group()
        if group is None:
            self.log.info(
                "GPU task %s: the task process does not lead its own process group (not started by "
                "Airflow's task supervisor); processes its callable starts are tied to the lease only "
                "through its environment (GPU_DAG_LEASE_ID) and when the callable ends",
                self.task_id,
            )
            return ()
        return (group,)

    def execute(self, context: Any) -> Any:
        lease = self._acquire_gpu_lease(context)
        before = _descendants(os.getpid())  # not the callable's: left alone
        saved = {key: os.environ.get(key) for key in lease.env()}
        os.environ.update(lease.env())
        context[LEASE_CONTEXT_KEY] = lease.to_dict()
        outcome = "failed"
        try:
            with _sigint_raises() as interruptible:
                self._gpu_interruptible = interruptible
                self._gpu_running = True  # from here a lost lease or SIGTERM interrupts the callable ...
                try:
                    if self._gpu_cancelled:  # ... and one before does not start it
                        raise AirflowException(
                            f"task {self.task_id!r} was killed before its GPU callable started"
                        )
                    self._raise_if_lost()
                    result = super().execute(context)
                finally:
                    self._gpu_running = False
            self._raise_if_lost()
            outcome = "success"
            return result
        except KeyboardInterrupt:
            self._raise_if_lost()
            raise
        except AirflowSkipException:
            outcome = "skipped"
            raise
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            # processes the callable started (torchrun, multiprocessing) that outlive it would keep
            # using GPUs the next task is given: stopped first, or the lease is left to the reclaim
            if self._stop_children(before):
                self._finish_gpu_lease(outcome)
            else:
                self._leave_lease_to_reclaim()

    def _stop_children(self, before: dict[int, str]) -> bool:
        """SIGTERM, then SIGKILL, to the processes started under this task process since ``before``
        (recorded in the lease first, so a reclaim kills them too); True once they are gone."""
        left = {pid: t for pid, t in _descendants(os.getpid()).items() if before.get(pid) != t}
        if not left:
            return True
        lease = self._gpu_lease
        for pid in left:
            if lease is not None and not lease.lost:
                try:
                    lease.register_process(pid)
                except Exception:
                    self.log.exception("GPU lease: cannot record process %s", pid)
        for sig, wait in ((signal.SIGTERM, self.child_stop_grace_s), (signal.SIGKILL, 5.0)):
            running = sorted(pid for pid, token in left.items() if process_start_token(pid) == token)
            if not running:
                return True
            self.log.warning(
                "GPU task: processes %s its callable started still run; sending %s", running, sig.name
            )
            for pid in running:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)
            if _processes_gone(left, wait):
                return True
        return False

    def _on_lease_lost(self, lease: Lease) -> None:
        if self._gpu_running and self._gpu_interruptible and threading.main_thread().is_alive():
            _thread.interrupt_main()  # KeyboardInterrupt in the callable; execute raises LeaseLost
        elif self._gpu_running:
            self.log.error(
                "GPU lease %s lost; the callable runs outside the main thread and cannot be stopped: "
                "the task fails when it returns",
                lease.lease_id,
            )

    def on_kill(self) -> None:
        """SIGTERM: stop the callable (an exception raised into it), which releases the lease."""
        self._gpu_cancelled = True
        super().on_kill()
        if self._gpu_running:
            raise AirflowException("GPU task terminated (SIGTERM); its GPU lease is released")
