"""DAGs for tests/integration/test_fallback_real.py: a fallback ladder under the real scheduler.

``fallback_real``: the pool ``fallback_gpus`` has 4 slots. ``blocker`` holds 2 of them until the ladder
is done; ``prep`` waits until ``blocker`` is running, so rung 1 (4 GPUs) cannot get its slots; its
start-deadline watcher skips it after 10 s and rung 2 (2 GPUs, smaller batch, gradient accumulation)
runs. ``evaluate`` receives rung 2's result.

``fallback_real_exhausted``: both rungs need more slots than the pool has; neither can start, the
ladder is exhausted and the run fails.

``fallback_real_shrunk``: rung 1 needs 6 GPUs of the 4-slot pool, rung 2 fits; run with the watermark
controller managing the pool (its too-large check must leave the rung to its ladder).
"""

from __future__ import annotations

import time

from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG

from airflow_gpu_dag.authoring import Rung, fallback_ladder

POOL = "fallback_gpus"
DONE = {"success", "failed", "skipped", "upstream_failed"}


def _state(context, task_id):
    ti = context["ti"]
    found = ti.get_task_states(dag_id=ti.dag_id, task_ids=[task_id], run_ids=[context["run_id"]])
    return (found.get(context["run_id"]) or {}).get(task_id)


def hold_slots_until_ladder_done(**context):
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and _state(context, "train.result") not in DONE:
        time.sleep(1)


def wait_for_blocker(**context):
    deadline = time.monotonic() + 600
    while _state(context, "blocker") != "running":
        if time.monotonic() > deadline:
            raise RuntimeError("blocker never started")
        time.sleep(0.5)


def train(batch_size, grad_accum, **context):
    return {"task": context["ti"].task_id, "batch_size": batch_size, "grad_accum": grad_accum}


def evaluate(result):
    return {"evaluated": result}


def _rung_task(rung):
    return PythonOperator(task_id=rung.name, python_callable=train, op_kwargs=dict(rung.params))


with DAG("fallback_real", schedule=None, catchup=False, tags=["gpu-dag-test"]):
    blocker = PythonOperator(
        task_id="blocker", python_callable=hold_slots_until_ladder_done, pool=POOL, pool_slots=2
    )
    prep = PythonOperator(task_id="prep", python_callable=wait_for_blocker)
    ladder = fallback_ladder(
        "train",
        [
            Rung("4x", gpus=4, pool=POOL, start_within=10, params={"batch_size": 64, "grad_accum": 1}),
            Rung("2x", gpus=2, pool=POOL, start_within=60, params={"batch_size": 32, "grad_accum": 2}),
        ],
        _rung_task,
        poke_interval=2,
    )
    ev = PythonOperator(task_id="evaluate", python_callable=evaluate, op_args=[ladder.output])
    prep >> ladder


def _ladder_dag(dag_id, rungs):
    """A DAG of one ladder ``train`` of ``(name, gpus, start_within, batch_size)`` rungs and ``evaluate``."""
    with DAG(dag_id, schedule=None, catchup=False, tags=["gpu-dag-test"]) as dag:
        ladder = fallback_ladder(
            "train",
            [
                Rung(
                    name,
                    gpus=gpus,
                    pool=POOL,
                    start_within=within,
                    params={"batch_size": bs, "grad_accum": 1},
                )
                for name, gpus, within, bs in rungs
            ],
            _rung_task,
            poke_interval=2,
        )
        PythonOperator(task_id="evaluate", python_callable=evaluate, op_args=[ladder.output])
    return dag


exhausted = _ladder_dag("fallback_real_exhausted", [("8x", 8, 5, 64), ("6x", 6, 5, 48)])
# the first rung needs more than the pool's live capacity (4): the watermark controller must leave it
# to its watcher (tests/integration/test_fallback_real.py), not fail it and with it the ladder
shrunk = _ladder_dag("fallback_real_shrunk", [("6x", 6, 20, 64), ("2x", 2, 60, 32)])
