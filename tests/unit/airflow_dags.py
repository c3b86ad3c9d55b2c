"""Random Airflow DAGs for the property tests of the priority-weight strategies: hypothesis
strategies for task ids, pools and ``executor_config`` hints (well-formed and malformed), the DAGs
built from them, and helpers that serialize a DAG, weigh its tasks under both strategies and reset
the strategies' caches."""

from __future__ import annotations

import math
import os
from types import SimpleNamespace
from typing import Any
from unittest import mock

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG
from airflow.serialization.serialized_objects import DagSerialization
from hypothesis import strategies as st

from airflow_gpu_dag.core.analysis.weight_rules import INT32_MAX, INT32_MIN
from airflow_gpu_dag.priority_strategy import CriticalPathPriorityStrategy, PackingPriorityStrategy

CRITICAL = "airflow_gpu_dag.priority_strategy.CriticalPathPriorityStrategy"


PACKING = "airflow_gpu_dag.priority_strategy.PackingPriorityStrategy"


STRATEGIES = (CriticalPathPriorityStrategy, PackingPriorityStrategy)


#: [gpu_dag] pools settings a case runs under (None: unset; packing then has nothing to plan against).
POOL_SETTINGS = (None, '{"gpu_default": 8}', '{"gpu_default": 2, "gpu_a100": 4, "gpu_ü": 1}')


#: Anything a hand-written ``executor_config`` might hold where a hint is expected.
ANY_VALUE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.sampled_from([0, 1, 2, 8, -1, 2**31, 2**63]),
    st.sampled_from([64, 1100, 1329, 4000]).map(lambda bits: 2**bits),  # past float: OverflowError
    st.sampled_from([64, 1329]).map(lambda bits: -(2**bits)),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.nan, math.inf, -math.inf, 1e308, -0.0, 5e-324]),
    st.text(max_size=12),
    st.sampled_from(["30m", "1h30m", "-5m", "1e400", "9" * 400 + "d", "80GiB", "eighty", "nan", "inf", ""]),
    st.lists(st.one_of(st.integers(-5, 5), st.text(max_size=4)), max_size=3),
    st.dictionaries(st.text(max_size=4), st.integers(-5, 5), max_size=2),
)


PATHS = st.one_of(ANY_VALUE, st.lists(st.text(max_size=10), max_size=3))


FALLBACK = st.one_of(
    ANY_VALUE,
    st.fixed_dictionaries({}, optional={"index": ANY_VALUE, "of": ANY_VALUE, "ladder": ANY_VALUE}),
)


MALFORMED_HINTS = st.fixed_dictionaries(
    {},
    optional={
        "duration_s": ANY_VALUE,
        "gpus": ANY_VALUE,
        "gpu_memory_mib": ANY_VALUE,
        "gpu_type": ANY_VALUE,
        "inputs": PATHS,
        "outputs": PATHS,
        "awaits": PATHS,
        "fallback": FALLBACK,
    },
)


GOOD_HINTS = st.fixed_dictionaries(
    {"duration_s": st.integers(0, 10 * 86400)},
    optional={"gpus": st.integers(1, 8), "gpu_memory_mib": st.integers(0, 81920)},
)


#: What a task's ``executor_config`` is: nothing, our hints (or garbage under our key), or garbage.
EXECUTOR_CONFIG = st.one_of(
    st.none(),
    st.builds(lambda h: {"gpu_dag": h}, MALFORMED_HINTS),
    st.builds(lambda h: {"gpu_dag": h}, ANY_VALUE),
    st.builds(lambda h: {"gpu_dag": h, "pod_override": None}, GOOD_HINTS),
)


#: Task ids Airflow accepts (``[\w.-]+``), unicode letters included.
TASK_ID = st.text(
    alphabet=st.characters(categories=("Ll", "Lu", "Lo", "Nd"), include_characters="_-"),
    min_size=1,
    max_size=16,
)


@st.composite
def airflow_dags(
    draw: st.DrawFn, hints: st.SearchStrategy[Any] = EXECUTOR_CONFIG, max_tasks: int = 12
) -> DAG:
    """A random acyclic Airflow DAG: unique (unicode) task ids, each task with up to 3 earlier upstream
    tasks, a random pool, pool slots, priority weight, weight rule and ``executor_config``."""
    ids = draw(st.lists(TASK_ID, min_size=1, max_size=max_tasks, unique_by=str.lower))
    dag_id = "bad_" + draw(TASK_ID)
    with DAG(dag_id, schedule=None) as dag:
        tasks = []
        for task_id in ids:
            tasks.append(
                EmptyOperator(
                    task_id=task_id,
                    executor_config=draw(hints),
                    pool=draw(st.sampled_from(["default_pool", "gpu_default", "gpu_a100", "gpu_ü", "nope"])),
                    pool_slots=draw(st.integers(1, 16)),
                    priority_weight=draw(st.integers(-(2**31), 2**31 - 1)),
                    weight_rule=draw(
                        st.sampled_from([CRITICAL, CRITICAL, PACKING, "downstream", "absolute"])
                    ),
                )
            )
        for i in range(1, len(tasks)):
            for j in draw(st.lists(st.integers(0, i - 1), max_size=3, unique=True)):
                tasks[j] >> tasks[i]
    return dag


def serialized(dag: DAG) -> Any:
    return DagSerialization.from_dict(DagSerialization.to_dict(dag))


def strategy_ti(sdag: Any, task_id: str, run_id: str, map_index: int | None = -1) -> Any:
    """What ``get_weight`` is given: the serialized task (``ti.task.get_dag()`` is the serialized DAG)."""
    return SimpleNamespace(
        task=sdag.task_dict[task_id], task_id=task_id, dag_id=sdag.dag_id, run_id=run_id, map_index=map_index
    )


def reset_strategies() -> None:
    for cls in STRATEGIES:
        cls._weights.reset()
        cls._failed.clear()


@mock.patch.dict(os.environ, {"AIRFLOW__GPU_DAG__PLAN_IN_BACKGROUND": "false"})
def under(pools: str | None, check: Any) -> None:
    """Run ``check()`` with ``[gpu_dag] pools`` = ``pools`` and plans made inline, fresh caches."""
    env = {"AIRFLOW__GPU_DAG__POOLS": pools} if pools else {}
    with mock.patch.dict(os.environ, env):
        if not pools:
            os.environ.pop("AIRFLOW__GPU_DAG__POOLS", None)
        reset_strategies()
        check()


def check_weights(sdag: Any, run_ids: list[str]) -> dict[str, dict[str, int]]:
    """Every task's weight under both strategies: an int within int32, no exception, no fallback."""
    out: dict[str, dict[str, int]] = {}
    for cls in STRATEGIES:
        strategy = cls()
        weights = out.setdefault(cls.__name__, {})
        for task_id in sdag.task_dict:
            for run_id in run_ids:
                for map_index in (-1, 0, None):
                    weight = strategy.get_weight(strategy_ti(sdag, task_id, run_id, map_index))
                    assert type(weight) is int, (cls.__name__, task_id, weight)
                    assert INT32_MIN <= weight <= INT32_MAX, (cls.__name__, task_id, weight)
            weights[task_id] = strategy.get_weight(strategy_ti(sdag, task_id, run_ids[0]))
        assert not cls._failed, f"{cls.__name__}.get_weight fell back (a swallowed crash) for {cls._failed}"
    return out
