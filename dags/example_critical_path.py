"""Example: a small training pipeline scheduled by its critical path.

    load_data -> preprocess -> init_model -> train -> checkpoint -> evaluate      (the main line)
                           \\-> baseline_eval                                      (side branch,
                           \\-> ablation_train                                      competing for GPUs)

Every task declares its estimated duration (and GPUs) with :func:`airflow_gpu_dag.gpu_hints`; the
estimates are what the plan and the critical-path priority use, the tasks themselves do tiny real
work in a few milliseconds: they write a small dataset, fit ``y = 3x + 1`` by gradient descent and
check that the model converged. GPU tasks sit in the pool ``gpu_default`` with ``pool_slots`` equal
to the GPUs they need (the pool is the GPU watermark), so ``train`` (4 GPUs) starts only when all 4
are free, and the critical-path weight rule makes the main line win the GPUs over the side branch.

Files go to ``$AIRFLOW_HOME/demo_data/<run_id>/`` (override with the run conf ``{"workdir": ...}``).
Run it with ``./scripts/demo.sh`` or ``airflow dags trigger example_critical_path``.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, task

from airflow_gpu_dag import CRITICAL_PATH_WEIGHT_RULE, gpu_hints

GPU_POOL = "gpu_default"


def _workdir(context: dict[str, Any]) -> Path:
    """The run's working directory (created on first use)."""
    conf = getattr(context.get("dag_run"), "conf", None) or {}
    base = conf.get("workdir") or os.path.join(
        os.environ.get("AIRFLOW_HOME", tempfile.gettempdir()), "demo_data"
    )
    path = Path(base) / str(context["run_id"]).replace(":", "_").replace("+", "_")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _read_rows(path: Path) -> list[tuple[float, float]]:
    rows = []
    for line in path.read_text().splitlines()[1:]:
        x, y = line.split(",")
        rows.append((float(x), float(y)))
    return rows


def _fit(rows: list[tuple[float, float]], w: float, b: float, lr: float, steps: int) -> tuple[float, float]:
    n = len(rows)
    for _ in range(steps):
        gw = sum(2 * (w * x + b - y) * x for x, y in rows) / n
        gb = sum(2 * (w * x + b - y) for x, y in rows) / n
        w, b = w - lr * gw, b - lr * gb
    return w, b


def _mse(rows: list[tuple[float, float]], w: float, b: float) -> float:
    return sum((w * x + b - y) ** 2 for x, y in rows) / len(rows)


@task(executor_config=gpu_hints(duration="15m", outputs=["demo/raw"]))
def load_data(**context: Any) -> str:
    """Write a raw dataset: 400 noisy samples of y = 3x + 1."""
    rng = random.Random(42)
    out = _workdir(context) / "raw.csv"
    lines = ["x,y"]
    for _ in range(400):
        x = rng.uniform(-1.0, 1.0)
        lines.append(f"{x:.6f},{3 * x + 1 + rng.gauss(0, 0.05):.6f}")
    out.write_text("\n".join(lines) + "\n")
    return str(out)


@task(executor_config=gpu_hints(duration="20m", inputs=["demo/raw"], outputs=["demo/clean"]))
def preprocess(raw: str, **context: Any) -> str:
    """Drop outliers and split train/holdout."""
    rows = [r for r in _read_rows(Path(raw)) if abs(r[1]) < 10]
    work = _workdir(context)
    split = int(len(rows) * 0.8)
    for name, part in (("train.csv", rows[:split]), ("holdout.csv", rows[split:])):
        (work / name).write_text("x,y\n" + "".join(f"{x},{y}\n" for x, y in part))
    return str(work)


@task(
    pool=GPU_POOL,
    pool_slots=1,
    executor_config=gpu_hints(duration="10m", gpus=1, gpu_memory="16GiB", outputs=["demo/model/init"]),
)
def init_model(clean: str, **context: Any) -> str:
    """Initialise the model's weights."""
    out = _workdir(context) / "model_init.json"
    out.write_text(json.dumps({"w": 0.0, "b": 0.0}))
    return str(out)


@task(
    pool=GPU_POOL,
    pool_slots=4,
    executor_config=gpu_hints(
        duration="1h30m",
        gpus=4,
        gpu_memory="40GiB",
        inputs=["demo/clean", "demo/model/init"],
        outputs=["demo/model/trained"],
    ),
)
def train(clean: str, init: str, **context: Any) -> str:
    """The training loop."""
    model = json.loads(Path(init).read_text())
    rows = _read_rows(Path(clean) / "train.csv")
    w, b = _fit(rows, model["w"], model["b"], lr=0.5, steps=200)
    out = _workdir(context) / "model.json"
    out.write_text(json.dumps({"w": w, "b": b, "steps": 200}))
    return str(out)


@task(executor_config=gpu_hints(duration="10m", inputs=["demo/model/trained"], outputs=["demo/checkpoints"]))
def checkpoint(model: str, **context: Any) -> str:
    """Persist the trained model as a checkpoint."""
    target = _workdir(context) / "checkpoints" / "step-200.json"
    target.parent.mkdir(exist_ok=True)
    shutil.copyfile(model, target)
    return str(target)


@task(
    pool=GPU_POOL,
    pool_slots=1,
    executor_config=gpu_hints(duration="20m", gpus=1, inputs=["demo/checkpoints", "demo/clean"]),
)
def evaluate(ckpt: str, clean: str) -> float:
    """Holdout error of the checkpoint; fails the task when the model did not converge."""
    model = json.loads(Path(ckpt).read_text())
    mse = _mse(_read_rows(Path(clean) / "holdout.csv"), model["w"], model["b"])
    if mse > 0.05:
        raise ValueError(f"model did not converge: holdout MSE {mse:.4f} > 0.05")
    return mse


@task(pool=GPU_POOL, pool_slots=1, executor_config=gpu_hints(duration="15m", gpus=1, inputs=["demo/clean"]))
def baseline_eval(clean: str) -> float:
    """Side branch: the error of a constant (mean) predictor, for comparison."""
    rows = _read_rows(Path(clean) / "holdout.csv")
    mean = sum(y for _, y in rows) / len(rows)
    return _mse(rows, 0.0, mean)


@task(
    pool=GPU_POOL,
    pool_slots=4,
    executor_config=gpu_hints(duration="40m", gpus=4, inputs=["demo/clean"], outputs=["demo/ablation"]),
)
def ablation_train(clean: str, **context: Any) -> str:
    """Side branch: a wide job on all 4 GPUs (a short run with a smaller learning rate). It is ready
    as early as ``init_model`` but has slack, so ``init_model`` and ``train`` get the GPUs first."""
    rows = _read_rows(Path(clean) / "train.csv")
    w, b = _fit(rows, 0.0, 0.0, lr=0.05, steps=50)
    out = _workdir(context) / "ablation.json"
    out.write_text(json.dumps({"w": w, "b": b, "mse": _mse(rows, w, b)}))
    return str(out)


with DAG(
    "example_critical_path",
    schedule=None,
    catchup=False,
    default_args={"weight_rule": CRITICAL_PATH_WEIGHT_RULE, "retries": 0},
    tags=["gpu", "example", "critical-path"],
    doc_md=__doc__,
) as dag:
    clean_dir = preprocess(load_data())
    init = init_model(clean_dir)
    ckpt = checkpoint(train(clean_dir, init))
    evaluate(ckpt, clean_dir)
    baseline_eval(clean_dir)
    ablation_train(clean_dir)
