"""Workload loaders and the ML-pipeline generator."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from workloads import GPU_POOL, WorkloadError, default_workloads_dir, load_workloads, ml_pipeline_workloads

from airflow_gpu_dag.core.model.graph import CycleError


def write(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "w.json"
    path.write_text(json.dumps(data))
    return path


def test_load_small_file(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        [
            {
                "name": "fam/x/inst.json",
                "tasks": [
                    {"id": "a", "d": 5, "gpus": 2, "parents": []},
                    {"id": "b", "d": 1.5, "gpus": 0, "parents": ["a"]},
                ],
            }
        ],
    )
    (w,) = load_workloads(path)
    assert w.family == "fam/x" and w.name == "fam/x/inst.json"
    a, b = w.graph.nodes["a"], w.graph.nodes["b"]
    assert (a.duration, a.gpus, a.pool, a.pool_slots) == (5.0, 2, GPU_POOL, 2)
    assert (b.gpus, b.pool) == (0, None)
    assert w.graph.upstream("b") == ["a"]


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ({"not": "a list"}, "must hold a list"),
        ([{"name": "i"}], "needs 'name' and a 'tasks' list"),
        ([{"name": "i", "tasks": [{"id": "a"}]}], "'i'.*needs 'id', numeric 'd'"),
        ([{"name": "i", "tasks": [{"id": "a", "d": 1, "gpus": 0, "parents": ["zz"]}]}], "parent 'zz'"),
        ([{"name": "i", "tasks": [{"id": "a", "d": -1, "gpus": 0}]}], "must be >= 0"),
    ],
)
def test_malformed_files_name_the_problem(tmp_path: Path, data: object, match: str) -> None:
    with pytest.raises(WorkloadError, match=match):
        load_workloads(write(tmp_path, data))


def test_cycle_and_missing_file(tmp_path: Path) -> None:
    cyc = [
        {"name": "c", "tasks": [{"id": "a", "d": 1, "parents": ["b"]}, {"id": "b", "d": 1, "parents": ["a"]}]}
    ]
    with pytest.raises(CycleError):
        load_workloads(write(tmp_path, cyc))
    with pytest.raises(WorkloadError, match="does not exist"):
        load_workloads(tmp_path / "missing.json")


def test_ml_pipelines_are_deterministic_six_stage_flows() -> None:
    first = ml_pipeline_workloads(6, seed=3)
    again = ml_pipeline_workloads(6, seed=3)
    other = ml_pipeline_workloads(6, seed=4)
    sig = [(w.name, sorted((t, n.duration, n.gpus) for t, n in w.graph.nodes.items())) for w in first]
    assert sig == [(w.name, sorted((t, n.duration, n.gpus) for t, n in w.graph.nodes.items())) for w in again]
    assert sig != [(w.name, sorted((t, n.duration, n.gpus) for t, n in w.graph.nodes.items())) for w in other]
    assert {w.family for w in first} == {"ml/sweep", "ml/llm_pipeline", "ml/nightly_eval"}
    for w in first:
        g = w.graph
        g.topological_order()
        trains = [t for t in g.nodes if t.endswith(".train")]
        assert trains
        for train in trains:
            prefix = train.rsplit(".", 1)[0]
            stages = {t.rsplit(".", 1)[1].split("_")[0] for t in g.nodes if t.startswith(prefix + ".")}
            assert {"init", "train", "checkpoint", "evaluate"} <= stages
            assert 1 <= g.nodes[train].gpus <= 8 and g.nodes[train].pool == GPU_POOL
        assert any(t.endswith("load") for t in g.nodes) and any(t.endswith("preprocess") for t in g.nodes)
        for node in g.nodes.values():
            assert node.duration >= 1
            if node.task_id.endswith(("load", "preprocess")):
                assert node.gpu is None


def test_default_dir_is_next_to_repo() -> None:
    assert default_workloads_dir().parts[-2:] == ("shared", "workloads")
    if (default_workloads_dir() / "wfinstances_dev.json").exists():
        loaded = load_workloads(default_workloads_dir() / "wfinstances_dev.json")
        assert len(loaded) == 71 and sum(len(w.graph) for w in loaded) == 27470
