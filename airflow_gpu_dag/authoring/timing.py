"""Time edges: start windows and stage dependencies.

    start_window(train, opens="22:00", closes="06:00", on_missed="skip")
    stage_dependency(train, evaluate, checkpoint_dir="/ckpt/{{ run_id }}", step=1000,
                     pattern="step-{step}", timeout=timedelta(hours=8))

``start_window`` inserts ``<task>__window`` (a :class:`~airflow_gpu_dag.sensors.StartWindowSensor`)
before the task, edge label ``time``, and makes the task check the window itself when it starts
(:class:`~airflow_gpu_dag.sensors.window.WindowGuard`, its ``pre_execute`` hook): a task that waited in
its pool until the window closed does not start (skipped or failed per ``on_missed``). The window is
recorded in both tasks' hints, so the plan starts them no earlier than it opens.
``stage_dependency`` does *not* add ``train >> evaluate``: it adds ``wait_<train>_ckpt_<N>`` (a
:class:`~airflow_gpu_dag.sensors.CheckpointSensor`) that starts alongside ``train`` (same upstream
tasks) and lets ``evaluate`` start as soon as checkpoint N is complete while training goes on.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow_gpu_dag.airflow.mapped import is_mapped
from airflow_gpu_dag.authoring._wiring import (
    as_operator,
    check_gatable,
    insert_before,
    labelled,
    require_dag,
    where_of,
)
from airflow_gpu_dag.contract import WindowHint
from airflow_gpu_dag.core.model.windows import parse_timezone, parse_window
from airflow_gpu_dag.executor_config import window_hints
from airflow_gpu_dag.sensors.checkpoint import CheckpointSensor
from airflow_gpu_dag.sensors.window import StartWindowSensor, WindowGuard, check_on_missed, templated

__all__ = ["TIME", "stage_dependency", "start_window"]

#: Edge label of time edges.
TIME = "time"


def start_window(
    task: Any,
    *,
    opens: Any,
    closes: Any,
    tz: str = "UTC",
    on_missed: str = "skip",
    task_id: str | None = None,
    deferrable: bool | None = None,
) -> StartWindowSensor:
    """Gate ``task`` on a start window; see :class:`~airflow_gpu_dag.sensors.StartWindowSensor`.

    ``opens``/``closes``: two times of day (daily window; ``closes <= opens`` spans midnight) or two
    date-times (a one-off window), or Jinja templates (checked at run time). ``deferrable``: the sensor
    defers until the window opens (needs a triggerer); default ``[operators] default_deferrable``.

    :raises ValueError: an impossible window (equal times of day, a one-off window that closes before
        it opens), a malformed time, an unknown timezone or policy; the message names the DAG and the
        task and says how to fix it.
    """
    task = as_operator(task)
    dag = require_dag(task, "start_window")
    where = where_of(task)
    check_gatable(task)  # before anything is added
    check_on_missed(on_missed, where)
    if templated(opens) or templated(closes):  # the times are checked at run time, the zone now
        parse_timezone(tz, where=where)
        window = None
    else:
        window = parse_window(opens, closes, tz, where=where)
    sensor = StartWindowSensor(
        task_id=task_id or f"{task.label}__window",  # label: the id inside its task group
        opens=opens,
        closes=closes,
        tz=tz,
        on_missed=on_missed,
        dag=dag,
        task_group=getattr(task, "task_group", None),
        # not given: the DAG's default_args, else [operators] default_deferrable
        **({} if deferrable is None else {"deferrable": deferrable}),
    )
    insert_before(task, sensor, label=TIME)
    hint = WindowHint.of(window, on_missed)
    for gated in (task, sensor):
        gated.executor_config = window_hints(gated.executor_config, hint)
    task._pre_execute_hook = WindowGuard(
        opens=opens,
        closes=closes,
        tz=tz,
        on_missed=on_missed,
        sensor_task_id=sensor.task_id,
        previous=task._pre_execute_hook,
    )
    return sensor


def stage_dependency(
    upstream: Any,
    downstream: Any,
    *,
    checkpoint_dir: Any,
    step: int,
    timeout: float | timedelta | None = None,
    pattern: str = "checkpoint-{step}",
    completeness: object = "marker",
    poke_interval: float = 10.0,
    conn_id: str | None = None,
    task_id: str | None = None,
    deferrable: bool | None = None,
) -> CheckpointSensor:
    """``downstream`` starts once ``upstream`` wrote checkpoint ``step`` (upstream keeps running).

    The checkpoint sensor watches ``upstream``: if it ends without writing the checkpoint (failed, or
    succeeded too early), the sensor fails at once, naming it, instead of waiting out ``timeout``.
    ``deferrable``: it waits in the triggerer; default ``[operators] default_deferrable``.

    :raises ValueError: ``downstream`` already waits for ``upstream`` to finish (an edge or a path:
        the checkpoint would change nothing), or ``upstream`` waits for ``downstream`` (a cycle); the
        message names the DAG, both tasks and the path.
    """
    upstream, downstream = as_operator(upstream), as_operator(downstream)
    dag = require_dag(upstream, "stage_dependency")
    for task in (upstream, downstream):
        if is_mapped(task):
            raise ValueError(
                f"DAG {dag.dag_id!r}, task {task.task_id!r}: stage_dependency() takes plain tasks, not "
                "mapped ones (.expand()): a checkpoint belongs to one training run."
            )
    if downstream.task_id == upstream.task_id:  # its sensor would wait for a task that waits for it
        raise ValueError(
            f"DAG {dag.dag_id!r}, task {upstream.task_id!r}: stage_dependency() got it as both upstream "
            f"and downstream, so it would wait for its own checkpoint {step} before it starts (a deadlock "
            "until the sensor's timeout). Fix: pass the training task and the task that reads its "
            "checkpoint."
        )
    after = {t.task_id for t in upstream.get_flat_relatives(upstream=False)}
    before = {t.task_id for t in upstream.get_flat_relatives(upstream=True)}
    if downstream.task_id in after:
        edge = f"{upstream.task_id} >> {downstream.task_id}"
        how = edge if downstream.task_id in upstream.downstream_task_ids else f"the path from {edge}"
        raise ValueError(
            f"DAG {dag.dag_id!r}: task {downstream.task_id!r} already waits for {upstream.task_id!r} to "
            f"finish, so a checkpoint could not start it earlier. Fix: remove {how} to start it at "
            f"checkpoint {step}."
        )
    if downstream.task_id in before:
        raise ValueError(
            f"DAG {dag.dag_id!r}: task {upstream.task_id!r} runs after {downstream.task_id!r}, so "
            f"{downstream.task_id} cannot wait for its checkpoint {step} (a cycle). Fix: swap the two "
            "tasks, or remove the path between them."
        )
    sensor = CheckpointSensor(
        task_id=task_id or f"wait_{upstream.label}_ckpt_{step}",  # in upstream's task group
        checkpoint_dir=checkpoint_dir,
        step=step,
        pattern=pattern,
        completeness=completeness,
        timeout=timeout,
        poke_interval=poke_interval,
        conn_id=conn_id,
        training_task_id=upstream.task_id,
        dag=dag,
        task_group=getattr(upstream, "task_group", None),
        # not given: the DAG's default_args, else [operators] default_deferrable
        **({} if deferrable is None else {"deferrable": deferrable}),
    )
    sensor.doc_md = (
        f"Stage dependency: {downstream.task_id} starts at checkpoint {step} of {upstream.task_id}."
    )
    for up_id in sorted(upstream.upstream_task_ids):
        dag.get_task(up_id) >> sensor
    labelled(sensor, downstream, TIME)
    return sensor
