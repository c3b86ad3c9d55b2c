"""Hyper-parameter sweep whose evaluation fan-out competes with training for the same GPU pool.

``prepare_data`` -> ``train_trial`` (one mapped GPU task per learning rate, 2 GPUs each) ->
``evaluate_trial`` (one mapped 1-GPU task per trained trial) -> ``select_best`` -> ``cleanup``.

Every trial and every evaluation takes slots of the same pool (``gpu_default``). With the
critical-path weight rule a trial (1 h + 20 min of remaining path) outranks an evaluation (20 min),
so when GPUs are short the scheduler keeps training the remaining trials and fits evaluations into
the gaps, instead of letting a wave of cheap evaluations delay the sweep's longest chain.

The work is real and tiny (a numpy two-layer network on a synthetic regression set, real checkpoint
files), so it runs in seconds without GPUs on a static inventory::

    export AIRFLOW__GPU_DAG__INVENTORY="2xsim:80GiB"
    airflow dags trigger hparam_sweep --conf '{"model_size": "small", "gpus": 1,
        "dataset_path": "/tmp/sweep", "learning_rates": [0.3, 0.1, 0.03, 0.01]}'
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
from airflow.sdk import DAG, Param, get_current_context, task

from airflow_gpu_dag import CRITICAL_PATH_WEIGHT_RULE, gpu_hints
from airflow_gpu_dag.authoring import cleanup

DAG_ID = "hparam_sweep"
#: GPUs each trial is declared with (its pool slots); ``gpus`` in the conf may use fewer.
TRIAL_GPUS = 2
HIDDEN = {"tiny": 8, "small": 32, "base": 64}
#: The default sweep; its length is the expected number of trials the planner shows (``map_length``)
#: until past runs tell how many there really were.
LEARNING_RATES = [0.3, 0.1, 0.03, 0.01]
#: A mean squared error above this is a diverged trial, reported as None. XCom values are JSON, which
#: has no inf or NaN (the Task SDK refuses to send one), and a huge finite float does not survive a
#: PostgreSQL metadata DB either: JSONB gives 1.58e102 back as a 103-digit integer, which the Task
#: SDK cannot hand to the next task ("can't serialize ints > 2**64 - 1"; found by the Docker smoke run).
DIVERGED_MSE = 1e6


def _error(mse: float) -> float | None:
    """The error as an XCom value: None when the trial diverged (not finite, or above DIVERGED_MSE)."""
    return mse if np.isfinite(mse) and mse <= DIVERGED_MSE else None


def _run_dir(params: dict[str, Any], run_id: str) -> Path:
    """Everything one sweep run writes: the dataset, one folder per trial, the summary."""
    return Path(params["dataset_path"]) / "runs" / run_id


def _forward(weights: dict[str, np.ndarray], x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    hidden = np.tanh(x @ weights["w1"] + weights["b1"])
    return hidden, hidden @ weights["w2"] + weights["b2"]


with DAG(
    DAG_ID,
    schedule=None,
    catchup=False,
    doc_md=__doc__,
    tags=["gpu-dag", "example"],
    max_active_tasks=32,
    default_args={"weight_rule": CRITICAL_PATH_WEIGHT_RULE, "retries": 1},
    params={
        "model_size": Param("tiny", type="string", enum=sorted(HIDDEN), description="Hidden layer width."),
        "gpus": Param(
            TRIAL_GPUS,
            type="integer",
            minimum=1,
            maximum=TRIAL_GPUS,
            description=f"Data-parallel GPUs per trial (at most the {TRIAL_GPUS} declared).",
        ),
        "dataset_path": Param(
            "/tmp/airflow-gpu-dag/sweep",
            type="string",
            minLength=1,
            pattern="^/",
            description="Absolute directory for the dataset, trial checkpoints and the summary.",
        ),
        "learning_rates": Param(
            LEARNING_RATES,
            type="array",
            items={"type": "number", "exclusiveMinimum": 0, "maximum": 10},
            minItems=1,
            maxItems=32,
            description="One trial per learning rate.",
        ),
        "epochs": Param(200, type="integer", minimum=1, maximum=5000, description="Epochs per trial."),
    },
) as dag:

    @task(executor_config=gpu_hints(duration="15m", outputs=["{{ params.dataset_path }}/runs"]))
    def prepare_data() -> list[dict[str, Any]]:
        """Write the synthetic regression set (train/validation) and return one spec per trial."""
        context = get_current_context()
        params = context["params"]
        run = _run_dir(params, context["run_id"])
        run.mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng(3)
        x = rng.uniform(-2, 2, size=(1200, 4))
        y = (np.sin(x[:, :1] * 1.5) + 0.5 * x[:, 1:2] * x[:, 2:3] + 0.1 * rng.normal(size=(1200, 1))).astype(
            float
        )
        np.savez(run / "data.npz", x_train=x[:1000], y_train=y[:1000], x_val=x[1000:], y_val=y[1000:])
        (run / "_SUCCESS").write_text("")
        return [{"trial": i, "lr": float(lr)} for i, lr in enumerate(params["learning_rates"])]

    @task.gpu(
        gpus=TRIAL_GPUS,
        gpu_memory="40GiB",
        duration="1h",
        executor_config=gpu_hints(map_length=len(LEARNING_RATES)),
    )
    def train_trial(spec: dict[str, Any], gpu_lease: dict[str, Any] | None = None) -> dict[str, Any]:
        """Train the two-layer network with the trial's learning rate; gradients averaged over shards."""
        context = get_current_context()
        params = context["params"]
        run = _run_dir(params, context["run_id"])
        data = np.load(run / "data.npz")
        rng = np.random.default_rng(spec["trial"])
        width = HIDDEN[params["model_size"]]
        weights = {
            "w1": rng.normal(0, 0.5, (4, width)),
            "b1": np.zeros(width),
            "w2": rng.normal(0, 0.5, (width, 1)),
            "b2": np.zeros(1),
        }
        leased = len((gpu_lease or {}).get("devices") or []) or TRIAL_GPUS
        shards = max(1, min(int(params["gpus"]), leased))
        parts = list(
            zip(np.array_split(data["x_train"], shards), np.array_split(data["y_train"], shards), strict=True)
        )
        loss = float("nan")
        for _ in range(int(params["epochs"])):
            grads: dict[str, list[np.ndarray]] = {k: [] for k in weights}
            losses = []
            for x, y in parts:
                hidden, pred = _forward(weights, x)
                err = (pred - y) / len(x)
                losses.append(float(np.mean((pred - y) ** 2)))
                dhidden = (err @ weights["w2"].T) * (1 - hidden**2)
                grads["w2"].append(hidden.T @ err)
                grads["b2"].append(err.sum(axis=0))
                grads["w1"].append(x.T @ dhidden)
                grads["b1"].append(dhidden.sum(axis=0))
            for key in weights:
                weights[key] -= spec["lr"] * 2 * np.mean(grads[key], axis=0)
            loss = float(np.mean(losses))
            if _error(loss) is None:
                break  # diverged: the evaluation reports it, the sweep goes on
        folder = run / f"trial_{spec['trial']:02d}"
        folder.mkdir(exist_ok=True)
        np.savez(folder / "model.npz", w1=weights["w1"], b1=weights["b1"], w2=weights["w2"], b2=weights["b2"])
        (folder / "_SUCCESS").write_text("")
        print(f"trial {spec['trial']} lr={spec['lr']}: train mse {loss:.4f} ({shards} shards)")
        return {**spec, "checkpoint": str(folder / "model.npz"), "train_mse": _error(loss)}

    @task.gpu(
        gpus=1,
        gpu_memory="16GiB",
        duration="20m",
        executor_config=gpu_hints(map_length=len(LEARNING_RATES)),
    )
    def evaluate_trial(result: dict[str, Any]) -> dict[str, Any]:
        """Validation MSE of one trained trial (None if it diverged, see DIVERGED_MSE)."""
        context = get_current_context()
        data = np.load(_run_dir(context["params"], context["run_id"]) / "data.npz")
        weights = dict(np.load(result["checkpoint"]))
        _, pred = _forward(weights, data["x_val"])
        mse = float(np.mean((pred - data["y_val"]) ** 2))
        print(f"trial {result['trial']} lr={result['lr']}: validation mse {mse:.4f}")
        return {**result, "val_mse": _error(mse)}

    @task(executor_config=gpu_hints(duration="10m"))
    def select_best(evaluations: list[dict[str, Any]]) -> dict[str, Any]:
        """Pick the trial with the lowest validation error and write the sweep summary."""
        context = get_current_context()
        run = _run_dir(context["params"], context["run_id"])
        # diverged trials (val_mse None) last
        ranked = sorted(evaluations, key=lambda e: (e["val_mse"] is None, e["val_mse"] or 0.0))
        best = ranked[0]
        shutil.copy(best["checkpoint"], run / "best_model.npz")
        (run / "summary.json").write_text(json.dumps({"best": best, "trials": ranked}, indent=2))
        mse = "diverged" if best["val_mse"] is None else f"{best['val_mse']:.4f}"
        print(f"best trial {best['trial']} lr={best['lr']} validation mse {mse}")
        return best

    @task(executor_config=gpu_hints(duration="10m"))
    def remove_trial_checkpoints() -> None:
        """Cleanup: drop the per-trial checkpoints (the best model and the summary stay)."""
        context = get_current_context()
        for folder in _run_dir(context["params"], context["run_id"]).glob("trial_*"):
            shutil.rmtree(folder, ignore_errors=True)

    trained = train_trial.expand(spec=prepare_data())
    evaluated = evaluate_trial.expand(result=trained)
    best: Any = select_best(evaluated)  # type: ignore[arg-type]  # TaskFlow resolves the XComArg
    cleanup(remove_trial_checkpoints().operator, after=best.operator)  # type: ignore[attr-defined]
