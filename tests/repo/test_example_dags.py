"""The example DAGs ``dags/llm_pipeline.py`` and ``dags/hparam_sweep.py``: they parse with no import
errors (the provider's cluster policy runs too), lint clean with ``airflow_gpu_dag.core.analysis.validation``,
have the structure the docs promise, validate their trigger ``--conf``, and their numpy work is
correct (gradient check)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from airflow.dag_processing.dagbag import DagBag

from airflow_gpu_dag.airflow.dag_reader import build_task_graph
from airflow_gpu_dag.core.analysis.validation import ValidationPolicy, validate_graph
from tests.scripts import load_script

DAGS = Path(__file__).resolve().parents[2] / "dags"


EXAMPLES = {"llm_pipeline": DAGS / "llm_pipeline.py", "hparam_sweep": DAGS / "hparam_sweep.py"}


POLICY = ValidationPolicy(pool_slots={"gpu_default": 8, "default_pool": 128}, max_gpus_per_host=8)


ATOMIC_STEPS = ("load", "preprocess", "init", "train", "checkpoint", "evaluate")


@pytest.fixture(scope="module")
def dags() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for dag_id, path in EXAMPLES.items():
        bag = DagBag(str(path))
        assert not bag.import_errors, f"{path.name}: {bag.import_errors}"
        assert dag_id in bag.dags, f"{path.name} defines {list(bag.dags)}, expected {dag_id}"
        out[dag_id] = bag.dags[dag_id]
    return out


def _module(name: str) -> ModuleType:
    return load_script(EXAMPLES[name], f"example_{name}")


@pytest.mark.parametrize("dag_id", sorted(EXAMPLES))
def test_lints_without_errors(dags: dict[str, Any], dag_id: str) -> None:
    graph, findings = build_task_graph(dags[dag_id])
    report = validate_graph(graph, POLICY, extra=findings)
    assert report.ok, "\n".join(str(f) for f in report.errors)
    assert not report.warnings, "\n".join(str(f) for f in report.warnings)


def test_llm_pipeline_structure(dags: dict[str, Any]) -> None:
    dag = dags["llm_pipeline"]
    ids = set(dag.task_dict)
    for stage in ("pretrain", "finetune"):
        for step in ATOMIC_STEPS:
            assert f"{stage}.{step}" in ids or f"{stage}.{step}.result" in ids, f"{stage}.{step} missing"
    # the stage chain: cleaning -> pre-training -> fine-tuning -> alignment evaluation
    graph, _ = build_task_graph(dag)
    order = graph.topological_order()
    for before, after in [
        ("clean_data", "pretrain.load"),
        ("pretrain.evaluate", "finetune.load"),
        ("finetune.evaluate", "alignment_eval"),
    ]:
        assert order.index(before) < order.index(after)
    # typed edges: the labels the graph view shows. An edge leaving a task group is labelled on the
    # group's join node (Airflow's EdgeModifier), so look the label up by target.
    into: dict[str, set[str]] = {}
    for targets in dag.edge_info.values():
        for target, info in targets.items():
            into.setdefault(target, set()).add(str(info.get("label")))
    assert into["wait_clean_corpus"] == {"data"}
    assert into["pretrain.load"] == {"data"}
    assert into["check_pretrain.evaluate"] == {"control"}
    assert into["finetune.load"] == {"control"}
    assert into["pretrain.train"] == {"budget"}
    assert into["remove_scratch"] == {"cleanup"}
    assert dag.task_dict["remove_scratch"].is_teardown
    # GPU nodes are in the GPU pool with one slot per GPU; the budget gate and fallback rungs exist
    train = dag.task_dict["pretrain.train"]
    assert (train.pool, train.pool_slots) == ("gpu_default", 2)
    assert "pretrain.train_budget" in dag.task_dict["pretrain.train"].upstream_task_ids
    rungs = {t: dag.task_dict[t].pool_slots for t in ("finetune.train.two_gpus", "finetune.train.one_gpu")}
    assert rungs == {"finetune.train.two_gpus": 2, "finetune.train.one_gpu": 1}
    assert all(t.weight_rule is not None for t in dag.tasks)


def test_hparam_sweep_fan_out_shares_the_gpu_pool(dags: dict[str, Any]) -> None:
    dag = dags["hparam_sweep"]
    train, evaluate = dag.task_dict["train_trial"], dag.task_dict["evaluate_trial"]
    assert (train.pool, train.pool_slots) == ("gpu_default", 2)
    assert (evaluate.pool, evaluate.pool_slots) == ("gpu_default", 1)
    assert train.__class__.__name__ == evaluate.__class__.__name__ == "DecoratedMappedOperator"
    assert dag.task_dict["remove_trial_checkpoints"].is_teardown
    # plans see the default sweep's four trials (declared map_length) before any run has happened
    graph, _ = build_task_graph(dag, expand_mapped=True)
    default_trials = len(dag.params["learning_rates"])
    assert default_trials == 4
    for task_id in ("train_trial", "evaluate_trial"):
        assert sum(1 for t in graph.nodes if t.startswith(f"{task_id}[")) == default_trials


@pytest.mark.parametrize(
    ("dag_id", "conf"),
    [
        ("llm_pipeline", {"gpus": 3}),
        ("llm_pipeline", {"model_size": "huge"}),
        ("llm_pipeline", {"dataset_path": "relative/path"}),
        ("hparam_sweep", {"learning_rates": []}),
        ("hparam_sweep", {"learning_rates": [-0.1]}),
        ("hparam_sweep", {"gpus": 0}),
    ],
)
def test_bad_conf_is_rejected(dags: dict[str, Any], dag_id: str, conf: dict[str, Any]) -> None:
    from airflow.sdk.definitions.param import ParamsDict
    from airflow.sdk.exceptions import ParamValidationError

    params = ParamsDict(dags[dag_id].params)
    with pytest.raises(ParamValidationError, match="Invalid input"):
        params.update(conf)  # validated on update, as when a run is triggered with --conf
        params.validate()


@pytest.mark.parametrize(
    ("dag_id", "conf"),
    [
        ("llm_pipeline", {"model_size": "small", "gpus": 1, "dataset_path": "/tmp/llm"}),
        (
            "hparam_sweep",
            {"model_size": "base", "gpus": 2, "dataset_path": "/tmp/s", "learning_rates": [0.1]},
        ),
    ],
)
def test_good_conf_is_accepted(dags: dict[str, Any], dag_id: str, conf: dict[str, Any]) -> None:
    from airflow.sdk.definitions.param import ParamsDict

    params = ParamsDict(dags[dag_id].params)
    params.update(conf)
    assert params.validate()["gpus"] == conf["gpus"]


def test_llm_gradients_match_finite_differences() -> None:
    llm = _module("llm_pipeline")
    rng = np.random.default_rng(0)
    pairs = llm._pairs(llm._synthetic_corpus(20))
    emb = rng.normal(0, 0.5, (len(llm.VOCAB), 4))
    out = rng.normal(0, 0.5, (4, len(llm.VOCAB)))
    _, grad_emb, grad_out = llm._loss_and_grads(emb, out, pairs)
    eps = 1e-6
    for matrix, grad in ((emb, grad_emb), (out, grad_out)):
        for index in [(0, 0), (3, 1), (matrix.shape[0] - 1, matrix.shape[1] - 1)]:
            saved = matrix[index]
            matrix[index] = saved + eps
            up, _, _ = llm._loss_and_grads(emb, out, pairs)
            matrix[index] = saved - eps
            down, _, _ = llm._loss_and_grads(emb, out, pairs)
            matrix[index] = saved
            assert grad[index] == pytest.approx((up - down) / (2 * eps), rel=1e-4, abs=1e-7)


def test_llm_corpus_is_learnable() -> None:
    """The synthetic corpus has structure: a few gradient steps cut the loss well below ln(V)."""
    llm = _module("llm_pipeline")
    pairs = llm._pairs(llm._synthetic_corpus(200))
    rng = np.random.default_rng(1)
    emb = rng.normal(0, 0.5, (len(llm.VOCAB), 16))
    out = rng.normal(0, 0.5, (16, len(llm.VOCAB)))
    for _ in range(40):
        loss, grad_emb, grad_out = llm._loss_and_grads(emb, out, pairs)
        emb -= 10.0 * grad_emb
        out -= 10.0 * grad_out
    assert loss < llm.CONVERGED_LOSS < np.log(len(llm.VOCAB))
