"""The demo's text output (no Airflow boot): plan table, outcome table, GPU pools."""

from __future__ import annotations

from pathlib import Path

import pytest

from scripts.demo import DEFAULT_DAGS_FOLDER, DEMO_DAG_ID, demo_pools, load_dag, render_outcome, render_plan


def test_demo_pools_from_static_inventory() -> None:
    pools = demo_pools("4xa100:80GiB")
    assert pools["gpu_default"] == 4


def test_plan_of_example_dag_names_the_critical_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__GPU_DAG__POOLS", '{"gpu_default": 4}')
    dag = load_dag(DEFAULT_DAGS_FOLDER, DEMO_DAG_ID)
    text = render_plan(dag)
    assert "critical path: load_data -> preprocess -> init_model -> train -> checkpoint -> evaluate" in text
    train = next(line for line in text.splitlines() if line.startswith("train "))
    # duration 1:30, ES 0:45, slack 0:00, priority = 2h remaining = 7200 s, 4 GPUs; key (fair, the
    # default) = due - 0.5 x priority - 6 h x its 2 descendants = 42375 - 3600 - 43200
    assert train.split()[:10] == [
        "train", "1:30", "0:45", "2:15", "0:45", "2:15", "0:00", "7200", "-4425s", "4"
    ]  # fmt: skip
    assert train.rstrip().endswith("*")
    ablation = next(line for line in text.splitlines() if line.startswith("ablation_train"))
    assert ablation.split()[6] == "1:30"  # slack
    assert "makespan with unlimited GPUs: 2:45" in text


def test_plan_and_outcome_show_the_key_in_one_unit(monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan's priority (remaining critical-path seconds) and the outcome's key (seconds after the
    trigger) were two units side by side (9900 against +15525s for one task): the plan now shows each
    task's key too, and it is the number the outcome shows for the weight the scheduler stores."""
    monkeypatch.setenv("AIRFLOW__GPU_DAG__POOLS", '{"gpu_default": 4}')
    dag = load_dag(DEFAULT_DAGS_FOLDER, DEMO_DAG_ID)
    plan_text = render_plan(dag)
    # W = 33900 GPU-seconds / 4 GPUs = 8475 s; due = min(5 x W, W + 12 h) = 42375 s after the trigger
    # (fair: stretch 5, chain 0.5, overdue 12 h); key = due - 0.5 x priority - 6 h x min(lead, 24)
    words = "key = due - 0.5 x priority - 6h00m x min(descendant lead, 24), seconds after the trigger"
    assert f"{words}, due = +42375s" in plan_text.splitlines()[0]
    load = next(line for line in plan_text.splitlines() if line.startswith("load_data "))
    assert load.split()[7:9] == ["9900", "-113775s"]  # 42375 - 4950 - 7 descendants x 6 h
    from airflow_gpu_dag.core.policy.objective import key_weight

    trigger = 1767225600.0  # 2026-01-01T00:00:00Z
    ti = {
        "task_id": "load_data",
        "map_index": -1,
        "state": "success",
        "start_date": "2026-01-01T00:00:01Z",
        "end_date": "2026-01-01T00:00:02Z",
        "priority_weight": key_weight(trigger - 113775.0),  # the weight rule's key for load_data
        "run_id": "manual__2026-01-01T00:00:00+00:00",
        "pool": "default_pool",
        "pool_slots": 1,
    }
    outcome = render_outcome([ti])
    row = next(line for line in outcome.splitlines() if line.startswith("load_data "))
    assert "-113775s" in row.split()
    assert "as in the plan (its run's due time" in outcome.splitlines()[-1]


def test_example_dag_tasks_use_gpu_pool_slots_equal_to_gpus() -> None:
    dag = load_dag(DEFAULT_DAGS_FOLDER, DEMO_DAG_ID)
    for task in dag.tasks:
        gpus = (task.executor_config or {}).get("gpu_dag", {}).get("gpus")
        if gpus:
            assert (task.pool, task.pool_slots) == ("gpu_default", gpus), task.task_id
        assert task.weight_rule == "airflow_gpu_dag.priority_strategy.CriticalPathPriorityStrategy"


def test_load_dag_names_what_it_found(tmp_path: Path) -> None:
    with pytest.raises(LookupError, match="no DAG 'nope'"):
        load_dag(DEFAULT_DAGS_FOLDER, "nope")
    with pytest.raises(LookupError, match="found: none"):
        load_dag(tmp_path, "nope")


def test_outcome_lists_tasks_in_start_order() -> None:
    tis = [
        {
            "task_id": "b",
            "map_index": -1,
            "state": "success",
            "start_date": "2026-01-01T00:00:05Z",
            "end_date": "2026-01-01T00:00:06Z",
            "priority_weight": 1,
            "pool": "p",
            "pool_slots": 1,
        },
        {
            "task_id": "a",
            "map_index": -1,
            "state": "success",
            "start_date": "2026-01-01T00:00:01Z",
            "end_date": "2026-01-01T00:00:02Z",
            "priority_weight": 9,
            "pool": "p",
            "pool_slots": 2,
        },
        {
            "task_id": "m",
            "map_index": 0,
            "state": "upstream_failed",
            "start_date": None,
            "end_date": None,
            "priority_weight": 1,
            "pool": "p",
            "pool_slots": 1,
        },
    ]
    from airflow_gpu_dag.core.policy.objective import key_weight

    run_id = "manual__2026-01-01T00:00:00+00:00"
    tis[1]["run_id"] = run_id
    tis[1]["priority_weight"] = key_weight(1767225600.0 - 90.0)  # key 90 s before that trigger
    text = render_outcome(tis)
    assert "started in this order: a -> b" in text.splitlines()
    assert "+4.0s" in text
    assert "m[0]" in text
    assert "-90s" in text  # a cross-DAG key is shown relative to its run's trigger
    assert text.splitlines()[-1].startswith("key: the task's cross-DAG key")


def test_load_dag_skips_broken_files(tmp_path: Path) -> None:
    (tmp_path / "aaa_broken.py").write_text("raise RuntimeError('broken on purpose')\n")
    (tmp_path / "mine.py").write_text(
        "from airflow.sdk import DAG\nwith DAG('mine', schedule=None) as dag:\n    pass\n"
    )
    assert load_dag(tmp_path, "mine").dag_id == "mine"
    with pytest.raises(LookupError, match="broken on purpose"):
        load_dag(tmp_path, "other")
