"""The example DAGs run for real: ``dags/llm_pipeline.py`` and ``dags/hparam_sweep.py`` triggered with
``--conf`` on a real scheduler, without GPUs (static inventory of two simulated GPUs), both at once
on one 2-slot GPU pool. Checked: both runs succeed, they wrote their real artifacts (checkpoints,
reports), the pool was never oversubscribed, an invalid conf is refused at trigger time, and the
training chain outranks the sweep (critical-path weights)."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_gpu_dag.testing import AirflowCluster
from tests.integration.conftest import STOP_GRACE_S
from tests.scripts import load_script

pytestmark = pytest.mark.airflow_real

ROOT = Path(__file__).resolve().parents[2]
POOL_SLOTS = 2


def _pool_peak() -> Any:
    return load_script("benchmarks/stress.py", "gpu_dag_benchmark_stress").pool_peak


@pytest.fixture(scope="module")
def examples() -> Iterator[dict[str, Any]]:
    folder = Path(tempfile.mkdtemp(prefix="gpu-dag-examples-"))
    try:
        dags = folder / "dags"
        dags.mkdir()
        for name in ("llm_pipeline.py", "hparam_sweep.py"):
            shutil.copy(ROOT / "dags" / name, dags / name)
        env = {
            "AIRFLOW__GPU_DAG__INVENTORY": "2xsim:80GiB",
            "AIRFLOW__GPU_DAG__POOLS": json.dumps({"gpu_default": POOL_SLOTS}),
            "AIRFLOW__GPU_DAG__LEASE_DIR": str(folder / "leases"),
        }
        with AirflowCluster(
            dags, pools={"gpu_default": POOL_SLOTS}, env=env, triggerer=True, stop_grace=STOP_GRACE_S
        ) as cluster:
            cluster.wait_for_dags(["llm_pipeline", "hparam_sweep"], timeout=300)
            bad = cluster.api(
                "POST",
                "/dags/llm_pipeline/dagRuns",
                json={"logical_date": None, "conf": {"gpus": 5}},
                check=False,
            )
            llm_conf = {"model_size": "tiny", "gpus": 2, "dataset_path": str(folder / "llm")}
            sweep_conf = {
                "model_size": "small",
                "gpus": 1,
                "dataset_path": str(folder / "sweep"),
                "learning_rates": [0.3, 0.1, 0.03],
                "epochs": 100,
            }
            runs = {
                "llm_pipeline": cluster.trigger("llm_pipeline", conf=llm_conf),
                "hparam_sweep": cluster.trigger("hparam_sweep", conf=sweep_conf),
            }
            states = {dag: cluster.wait_for_run(dag, run, timeout=900) for dag, run in runs.items()}
            tis = {dag: cluster.task_instances(dag, run) for dag, run in runs.items()}
            yield {"folder": folder, "bad": bad, "runs": runs, "states": states, "tis": tis}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_both_examples_succeed(examples: dict[str, Any]) -> None:
    assert examples["states"] == {"llm_pipeline": "success", "hparam_sweep": "success"}
    states = {ti["task_id"]: ti["state"] for ti in examples["tis"]["llm_pipeline"]}
    assert states["alignment_eval"] == "success"
    assert states["finetune.train.two_gpus"] == "success"  # 2 GPUs were free: no fallback
    assert states["finetune.train.one_gpu"] == "skipped"
    assert states["remove_scratch"] == "success"
    sweep = [
        ti for ti in examples["tis"]["hparam_sweep"] if ti["task_id"] in ("train_trial", "evaluate_trial")
    ]
    assert sorted((ti["task_id"], ti["map_index"], ti["state"]) for ti in sweep) == [
        (task, i, "success") for task in ("evaluate_trial", "train_trial") for i in range(3)
    ]


def test_examples_wrote_real_artifacts(examples: dict[str, Any]) -> None:
    llm = examples["folder"] / "llm" / "runs" / examples["runs"]["llm_pipeline"]
    for stage in ("pretrain", "finetune"):
        assert (llm / "checkpoints" / stage / "model.npz").stat().st_size > 0
        assert (llm / "checkpoints" / stage / "_SUCCESS").exists()
    report = json.loads((llm / "alignment_report.json").read_text())
    assert report["pairs"] == 3
    assert not (llm / "scratch").exists()  # cleaned up
    sweep = examples["folder"] / "sweep" / "runs" / examples["runs"]["hparam_sweep"]
    summary = json.loads((sweep / "summary.json").read_text())
    assert len(summary["trials"]) == 3
    finite = [t["val_mse"] for t in summary["trials"] if t["val_mse"] is not None]  # None: diverged
    assert summary["best"]["val_mse"] == min(finite)
    assert (sweep / "best_model.npz").exists()
    assert not list(sweep.glob("trial_*"))


def test_gpu_pool_is_shared_and_never_oversubscribed(examples: dict[str, Any]) -> None:
    pool_peak = _pool_peak()
    all_tis = [ti for tis in examples["tis"].values() for ti in tis]
    peak, _ = pool_peak(all_tis, "gpu_default")
    assert 1 <= peak <= POOL_SLOTS
    assert {ti["dag_id"] for ti in all_tis if ti["pool"] == "gpu_default"} == {"llm_pipeline", "hparam_sweep"}


def test_invalid_conf_is_refused_at_trigger(examples: dict[str, Any]) -> None:
    bad = examples["bad"]
    assert bad.status_code == 400
    assert "gpus" in bad.text and "maximum" in bad.text


def test_weights_are_the_cross_dag_keys_of_each_run(examples: dict[str, Any]) -> None:
    """What the scheduler and the api-server stored is, task for task, the key of docs/priority.md:
    2**31 - 1 - round(trigger + min(5 W, W + 12 h) - 0.5 remaining - 6 h min(lead, 24) - epoch)
    (objective fair, the default; lead: the task's descendant lead; W =
    the run's GPU work over the 2-GPU pool, a mapped task counted as its expected instances: the sweep
    declares ``map_length=4`` and this is its first run, so there is no history), with the trigger time
    of the run (from its run id)."""
    from airflow_gpu_dag.airflow.dag_reader import build_task_graph
    from airflow_gpu_dag.cli.loading import load_dags
    from airflow_gpu_dag.core.model.mapping import weights_by_task
    from airflow_gpu_dag.core.policy.objective import get_objective, run_weights
    from airflow_gpu_dag.priority.trigger import parse_run_id_time

    dags = load_dags([examples["folder"] / "dags"]).dags
    for dag_id, tis in examples["tis"].items():
        trigger = parse_run_id_time(examples["runs"][dag_id])
        assert trigger is not None, examples["runs"][dag_id]
        graph, _ = build_task_graph(dags[dag_id], expand_mapped=True)
        keys = run_weights(graph, trigger, {"gpu_default": POOL_SLOTS}, get_objective(None))
        expected = weights_by_task(graph, keys)
        stored = {ti["task_id"]: ti["priority_weight"] for ti in tis}  # mapped instances: one weight each
        assert stored == {task_id: expected[task_id] for task_id in stored}, dag_id
    sweep = {ti["task_id"]: ti["priority_weight"] for ti in examples["tis"]["hparam_sweep"]}
    assert sweep["train_trial"] > sweep["evaluate_trial"]  # within a run: the critical path first
