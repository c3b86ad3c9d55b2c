"""Task-contract fakes shared by the contract, cluster-policy, parse-time and priority-strategy tests:
figures a DAG file forges into its ``executor_config`` (the derived remaining time and GPU work the
policy alone may write), DAGs that carry them, hypothesis strategies for hand-written
``executor_config`` values, and the weight of a task in the run they are all weighed in.

The settings these helpers are weighed under (a ``gpu_default`` pool of 8, plans made inline, fresh
strategy caches) are the ``_fresh_task_contract`` fixture of ``tests/unit/conftest.py``."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG, task
from hypothesis import strategies as st

from airflow_gpu_dag import CRITICAL_PATH_WEIGHT_RULE, gpu_hints
from airflow_gpu_dag import contract as contract_module
from airflow_gpu_dag.core.analysis.weight_rules import INT32_MAX, INT32_MIN
from airflow_gpu_dag.priority_strategy import CriticalPathPriorityStrategy
from tests.unit.airflow_dags import STRATEGIES

#: The run every task is weighed in.
RUN_ID = "manual__2026-11-30T12:00:00+00:00"


#: A year of "remaining time": the version-1 figures, and the same in the contract's ``derived``.
FORGED = {"remaining_s": 3e7, "slot_seconds": {}, "version": ""}


FORGED_DERIVED = {"remaining_s": 3e7, "slot_seconds": {}, "digest": "0" * 32}


def contract_weight(sdag: Any, task_id: str, strategy: Any = None, map_index: int = -1, **extra: Any) -> int:
    """The weight of ``task_id`` of the serialized DAG in :data:`RUN_ID` (critical path unless another
    ``strategy`` is given); ``extra`` are further task-instance fields (``dag_version_id``)."""
    ti = SimpleNamespace(
        task=sdag.task_dict[task_id],
        task_id=task_id,
        dag_id=sdag.dag_id,
        run_id=RUN_ID,
        map_index=map_index,
        **extra,
    )
    return int((strategy or CriticalPathPriorityStrategy()).get_weight(ti))


def training_dag(forged: dict[str, Any] | None, dag_id: str = "pretrain", mapped: bool = True) -> DAG:
    """A 4-GPU, 250-hour training and one mapped evaluation; ``forged`` goes into the training task's
    executor_config (the version-1 key, or the contract's ``derived``)."""
    with DAG(dag_id, schedule=None, default_args={"weight_rule": CRITICAL_PATH_WEIGHT_RULE}) as dag:
        config = gpu_hints(duration="250h", gpus=4)
        if forged is not None:
            config = {**config, **forged}
        train = BashOperator(
            task_id="train", bash_command="true", pool="gpu_default", pool_slots=4, executor_config=config
        )
        if mapped:

            @task(executor_config=gpu_hints(duration="20m"))
            def shard(x: int) -> int:
                return x

            train >> shard.expand(x=[1, 2, 3])
    return dag


def small_dag(dag_id: str, configs: list[Any], mapped: bool) -> DAG:
    """A chain of BashOperators with these executor_configs; the last one mapped over two values."""
    with DAG(dag_id, schedule=None, default_args={"weight_rule": CRITICAL_PATH_WEIGHT_RULE}) as dag:
        previous = None
        for i, config in enumerate(configs):
            hints = config.get("gpu_dag") if isinstance(config, dict) else None
            gpus = hints.get("gpus") if isinstance(hints, dict) else None
            slots = gpus if isinstance(gpus, int) and not isinstance(gpus, bool) and 1 <= gpus <= 8 else 1
            kwargs = {
                "task_id": f"t{i}",
                "executor_config": config,
                "pool": "gpu_default",
                "pool_slots": slots,
            }
            if mapped and i == len(configs) - 1:
                task_ = BashOperator.partial(**kwargs).expand(bash_command=["true", "false"])
            else:
                task_ = BashOperator(bash_command="true", **kwargs)
            if previous is not None:
                previous >> task_
            previous = task_
    return dag


def all_weights(sdag: Any) -> dict[tuple[str, int], int]:
    """Every task's weight under both strategies at map indexes -1, 0 and 1: each an int within int32,
    and no strategy fell back."""
    out = {}
    for cls in STRATEGIES:
        for task_id in sdag.task_dict:
            for map_index in (-1, 0, 1):
                weight = contract_weight(sdag, task_id, cls(), map_index)
                assert type(weight) is int and INT32_MIN <= weight <= INT32_MAX
                out[(cls.__name__, task_id, map_index)] = weight
        assert not cls._failed, f"{cls.__name__}.get_weight fell back (a swallowed crash) for {cls._failed}"
    return out  # type: ignore[return-value]


#: Anything JSON-like (and a little beyond: huge ints, NaN, tuples) a hand-written executor_config holds.
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.sampled_from([0, 1, 2, 8, -1, 2**31, 2**63, 10**400, -(2**5000)]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=10),
    st.sampled_from(["30m", "1h30m", "-5m", "80GiB", "a100", "22:00", "skip", "", "nan"]),
)


VALUES = st.recursive(
    SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.tuples(children),
        st.dictionaries(st.text(max_size=8), children, max_size=3),
    ),
    max_leaves=8,
)


#: Keys of the contract, its aliases, near misses and anything else.
KEYS = st.one_of(
    st.sampled_from([*contract_module.json_schema()["properties"], "gpu_mem", "durations", "gpu", "fallbak"]),
    st.text(max_size=8),
)


SUB_KEYS = st.sampled_from(
    ["opens", "closes", "tz", "fixed", "templated", "on_missed", "index", "rungs", "assumed_index",
     "start_within_s", "watched", "ladder", "rung", "remaining_s", "slot_seconds", "digest", "of"]
)  # fmt: skip


#: What a hand-written ``gpu_dag`` hint holds: any value, or a dict of contract keys (and others).
RAW = st.one_of(
    VALUES,
    st.dictionaries(KEYS, st.one_of(VALUES, st.dictionaries(SUB_KEYS, VALUES, max_size=4)), max_size=6),
)


#: Well-formed hints: a duration and maybe a GPU count.
GOOD = st.builds(
    lambda d, g: gpu_hints(duration=d, gpus=g),
    st.integers(0, 36_000),
    st.one_of(st.none(), st.integers(1, 4)),
)
