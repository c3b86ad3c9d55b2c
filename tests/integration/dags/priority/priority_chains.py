"""Three independent chains in a 1-slot pool, generated twice: once with the critical-path weight
rule, once with Airflow's default ``downstream`` rule, each DAG in its own pool (``POOLS``) so that
their runs can go at the same time without competing. Every task really sleeps ~1 s; the
estimates (``gpu_hints(duration=...)``) are what the critical-path rule plans with.

    chain a: a1 (3h)                         remaining: a1=10800
    chain b: b1 -> b2 -> b3 -> b4 (10m each)  remaining: b1=2400 b2=1800 b3=1200 b4=600
    chain c: c1 -> c2 (50m each)              remaining: c1=6000 c2=3000

Used by tests/integration/test_priority_real_scheduler.py.
"""

from __future__ import annotations

import time

from airflow.sdk import DAG, task

from airflow_gpu_dag import CRITICAL_PATH_WEIGHT_RULE, gpu_hints

POOLS = {"cp_chains_critical": "one_slot_critical", "cp_chains_downstream": "one_slot_downstream"}
CHAINS: dict[str, list[str]] = {
    "a": ["3h"],
    "b": ["10m", "10m", "10m", "10m"],
    "c": ["50m", "50m"],
}


@task
def work() -> None:
    time.sleep(1)


def build(dag_id: str, weight_rule: str | None) -> DAG:
    default_args = {"pool": POOLS[dag_id], "retries": 0}
    if weight_rule is not None:
        default_args["weight_rule"] = weight_rule
    with DAG(dag_id, schedule=None, catchup=False, default_args=default_args, tags=["priority"]) as dag:
        for chain, durations in CHAINS.items():
            previous = None
            for index, duration in enumerate(durations, start=1):
                current = work.override(
                    task_id=f"{chain}{index}", executor_config=gpu_hints(duration=duration)
                )()
                if previous is not None:
                    previous >> current
                previous = current
    return dag


cp_chains_critical = build("cp_chains_critical", CRITICAL_PATH_WEIGHT_RULE)
cp_chains_downstream = build("cp_chains_downstream", None)
