"""LLM training pipeline: data cleaning -> pre-training -> instruction fine-tuning -> alignment evaluation.

Each training flow is split into six atomic nodes (load, preprocess, init, train, checkpoint,
evaluate), every node declares its estimated duration, GPUs, GPU memory and retries, and the edges
are typed:

* **data**: the cleaned corpus is consumed only once it is *complete* (``_SUCCESS`` marker), through
  a completeness sensor (``data_edge``);
* **control**: instruction fine-tuning starts only if pre-training converged (``validation_edge`` on
  the evaluation's loss; otherwise the rest of the chain is skipped);
* **cleanup**: the scratch space (tokenised features) is removed whatever happened (``cleanup``);
* **budget**: the pre-training loop waits (deferred, no GPU held) while the run's GPU-hour budget is
  used up (``budget_gate``);
* **fallback**: fine-tuning wants 2 GPUs; if they are not free within 20 minutes it runs on 1 GPU
  with gradient accumulation 2 (``fallback_ladder``).

Priority is the critical path (``weight_rule``), so the long chain goes first when GPUs are short.

The work is real but tiny, so the DAG runs in seconds on any machine: a factorised bigram language
model in numpy (``model_size`` sets its width), trained by data-parallel gradient averaging over
``gpus`` shards, with real checkpoint files. Without GPUs, give the provider a static inventory::

    export AIRFLOW__GPU_DAG__INVENTORY="2xsim:80GiB"      # two simulated 80 GiB GPUs
    airflow dags trigger llm_pipeline --conf '{"model_size": "tiny", "gpus": 2, "dataset_path": "/tmp/llm"}'
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG, Param, TaskGroup

from airflow_gpu_dag import CRITICAL_PATH_WEIGHT_RULE, gpu_hints
from airflow_gpu_dag.authoring import Rung, budget_gate, cleanup, data_edge, fallback_ladder, validation_edge
from airflow_gpu_dag.operators import GpuPythonOperator

DAG_ID = "llm_pipeline"
#: GPUs the training nodes are declared with (their pool slots); ``gpus`` in the conf may use fewer.
TRAIN_GPUS = 2
MODEL_WIDTH = {"tiny": 8, "small": 16, "base": 32}
CONVERGED_LOSS = 3.0  # nats per token; a uniform guess over the 60 words is ln(60) ~ 4.1

_VOCAB_TEXT = (
    "the a model data token train learn loss weight gradient layer attention head batch epoch step "
    "answer question explain write summarize translate list helpful harmless honest please thanks "
    "user assistant because therefore first then finally result value check safe refuse cannot will "
    "is are was be can should would not and or but if of to in on for with"
)
VOCAB = _VOCAB_TEXT.split()
PREFERRED = ["please explain the answer", "the assistant will answer honest", "first check then answer"]
REJECTED = ["refuse refuse refuse", "cannot cannot not not", "harmless harmless harmless harmless"]


# -------------------------------------------------------------------------------------------- helpers
def _run_dir(params: dict[str, Any], run_id: str) -> Path:
    """Everything one run writes: the cleaned corpus, scratch features, checkpoints, reports."""
    return Path(params["dataset_path"]) / "runs" / run_id


def _synthetic_corpus(n_lines: int, seed: int = 7) -> list[str]:
    """Lines from a sparse Markov chain over the vocabulary (each word has 3 likely successors), so
    a bigram model has something to learn: loss falls from ln(V) ~ 4.1 towards ln(3) ~ 1.1."""
    rng = np.random.default_rng(seed)
    successors = [rng.choice(len(VOCAB), 3, replace=False) for _ in VOCAB]
    lines = []
    for _ in range(n_lines):
        word = int(rng.integers(len(VOCAB)))
        words = [word]
        for _ in range(int(rng.integers(3, 12)) - 1):
            word = int(successors[word][rng.integers(3)] if rng.random() < 0.9 else rng.integers(len(VOCAB)))
            words.append(word)
        lines.append(" ".join(VOCAB[w] for w in words))
    return lines


def _ids(text: str) -> list[int]:
    index = {w: i for i, w in enumerate(VOCAB)}
    return [index[w] for w in text.split() if w in index]


def _pairs(lines: list[str]) -> np.ndarray:
    """(current, next) token id pairs of every line."""
    out = [(a, b) for line in lines for a, b in zip(_ids(line), _ids(line)[1:], strict=False)]
    return np.array(out or [(0, 0)], dtype=np.int64)


def _loss_and_grads(
    emb: np.ndarray, out: np.ndarray, pairs: np.ndarray
) -> tuple[float, np.ndarray, np.ndarray]:
    """Softmax cross-entropy of the factorised bigram model ``logits = emb[x] @ out``."""
    onehot = np.eye(len(emb))[pairs[:, 0]]
    h = onehot @ emb
    logits = h @ out
    logits -= logits.max(axis=1, keepdims=True)
    prob = np.exp(logits)
    prob /= prob.sum(axis=1, keepdims=True)
    n = len(pairs)
    loss = float(-np.log(prob[np.arange(n), pairs[:, 1]] + 1e-12).mean())
    dlogits = prob
    dlogits[np.arange(n), pairs[:, 1]] -= 1.0
    dlogits /= n
    return loss, onehot.T @ (dlogits @ out.T), h.T @ dlogits


def _shards(params: dict[str, Any], lease: dict[str, Any] | None) -> int:
    """Data-parallel width: the conf's ``gpus``, at most the GPUs actually leased."""
    leased = len((lease or {}).get("devices") or []) or TRAIN_GPUS
    return max(1, min(int(params["gpus"]), leased))


# -------------------------------------------------------------------------------------------- tasks
def clean_data(**context: Any) -> str:
    """Generate a raw corpus (if missing), drop empty, junk and duplicate lines, write shards + _SUCCESS."""
    params = context["params"]
    root = Path(params["dataset_path"])
    raw = root / "raw.txt"
    if not raw.exists():
        lines = _synthetic_corpus(600)
        lines += ["", "<junk> %%%", *lines[:100]]  # empty, junk and duplicated lines to clean
        raw.parent.mkdir(parents=True, exist_ok=True)
        raw.write_text("\n".join(lines))
    clean_dir = _run_dir(params, context["run_id"]) / "clean"
    if clean_dir.exists():
        shutil.rmtree(clean_dir)
    clean_dir.mkdir(parents=True)
    seen: set[str] = set()
    kept = []
    for line in raw.read_text().splitlines():
        line = line.strip().lower()
        if len(line.split()) < 3 or "<junk>" in line or line in seen:
            continue
        seen.add(line)
        kept.append(line)
    for shard in range(4):
        (clean_dir / f"part-{shard:05d}.txt").write_text("\n".join(kept[shard::4]))
    (clean_dir / "_SUCCESS").write_text(json.dumps({"lines": len(kept)}))
    print(f"cleaned corpus: {len(kept)} lines -> {clean_dir}")
    return str(clean_dir)


def load(stage: str, **context: Any) -> dict[str, Any]:
    """Data loading: list the shards of the stage's dataset (pre-training corpus or instruction set)."""
    run = _run_dir(context["params"], context["run_id"])
    if stage == "pretrain":
        files = sorted(str(p) for p in (run / "clean").glob("part-*.txt"))
    else:
        sft = run / "sft"
        sft.mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng(11)
        pairs = [
            f"user {q} assistant {a}"
            for q in ("explain", "summarize", "translate", "list")
            for a in PREFERRED
        ]
        (sft / "part-00000.txt").write_text("\n".join(rng.permutation(pairs * 10)))
        files = [str(sft / "part-00000.txt")]
    if not files:
        raise FileNotFoundError(f"{stage}: no dataset shards under {run}")
    return {"files": files}


def preprocess(stage: str, **context: Any) -> str:
    """Tokenise into (current, next) id pairs; 90/10 train/holdout split, saved to scratch."""
    loaded = context["ti"].xcom_pull(task_ids=f"{stage}.load")
    lines = [line for f in loaded["files"] for line in Path(f).read_text().splitlines()]
    pairs = _pairs(lines)
    rng = np.random.default_rng(0)
    pairs = pairs[rng.permutation(len(pairs))]
    cut = max(1, int(0.9 * len(pairs)))
    scratch = _run_dir(context["params"], context["run_id"]) / "scratch" / stage
    scratch.mkdir(parents=True, exist_ok=True)
    np.save(scratch / "train.npy", pairs[:cut])
    np.save(scratch / "holdout.npy", pairs[cut:])
    return str(scratch)


def init_model(stage: str, **context: Any) -> str:
    """Model initialisation: random weights (pre-training) or the pre-trained checkpoint (fine-tuning)."""
    params = context["params"]
    run = _run_dir(params, context["run_id"])
    target = run / "scratch" / stage / "init.npz"
    if stage == "pretrain":
        rng = np.random.default_rng(1)
        width = MODEL_WIDTH[params["model_size"]]
        emb = rng.normal(0, 0.5, (len(VOCAB), width))
        out = rng.normal(0, 0.5, (width, len(VOCAB)))
        np.savez(target, emb=emb, out=out)
    else:
        shutil.copy(run / "checkpoints" / "pretrain" / "model.npz", target)
    return str(target)


def train(stage: str, accumulation: int = 1, **context: Any) -> dict[str, Any]:
    """The training loop: full-batch gradient descent, gradients averaged over data-parallel shards."""
    params = context["params"]
    scratch = _run_dir(params, context["run_id"]) / "scratch" / stage
    weights = np.load(scratch / "init.npz")
    emb, out = weights["emb"].copy(), weights["out"].copy()
    data = np.load(scratch / "train.npy")
    shards = np.array_split(data, _shards(params, context.get("gpu_lease")) * accumulation)
    lr = 10.0 if stage == "pretrain" else 2.0
    epochs = 40 if stage == "pretrain" else 20
    history = []
    for _ in range(epochs):
        grads = [_loss_and_grads(emb, out, s) for s in shards if len(s)]
        emb -= lr * np.mean([g[1] for g in grads], axis=0)
        out -= lr * np.mean([g[2] for g in grads], axis=0)
        history.append(float(np.mean([g[0] for g in grads])))
    np.savez(scratch / "trained.npz", emb=emb, out=out)
    print(f"{stage}: loss {history[0]:.3f} -> {history[-1]:.3f} over {epochs} epochs, {len(shards)} shards")
    return {"first_loss": history[0], "final_loss": history[-1], "shards": len(shards)}


def checkpoint(stage: str, **context: Any) -> str:
    """Checkpoint persistence: copy the trained weights, write a manifest, then the _SUCCESS marker."""
    run = _run_dir(context["params"], context["run_id"])
    target = run / "checkpoints" / stage
    target.mkdir(parents=True, exist_ok=True)
    shutil.copy(run / "scratch" / stage / "trained.npz", target / "model.npz")
    digest = hashlib.sha256((target / "model.npz").read_bytes()).hexdigest()
    (target / "manifest.json").write_text(json.dumps({"model.npz": digest}))
    (target / "_SUCCESS").write_text("")
    return str(target / "model.npz")


def evaluate(stage: str, **context: Any) -> dict[str, float]:
    """Held-out loss of the checkpoint."""
    run = _run_dir(context["params"], context["run_id"])
    model = np.load(run / "checkpoints" / stage / "model.npz")
    holdout = np.load(run / "scratch" / stage / "holdout.npy")
    loss, _, _ = _loss_and_grads(model["emb"], model["out"], holdout)
    print(f"{stage}: held-out loss {loss:.3f}")
    return {"loss": loss}


def converged(result: dict[str, float]) -> bool:
    """Control edge: fine-tune only a pre-trained model whose held-out loss is low enough."""
    return float(result["loss"]) < CONVERGED_LOSS


def alignment_eval(**context: Any) -> dict[str, Any]:
    """Alignment evaluation: the fine-tuned model must prefer the preferred answers to the rejected ones."""
    run = _run_dir(context["params"], context["run_id"])
    model = np.load(run / "checkpoints" / "finetune" / "model.npz")
    wins = 0
    for good, bad in zip(PREFERRED, REJECTED, strict=True):
        good_loss, _, _ = _loss_and_grads(model["emb"], model["out"], _pairs([good]))
        bad_loss, _, _ = _loss_and_grads(model["emb"], model["out"], _pairs([bad]))
        wins += good_loss < bad_loss
    report = {"win_rate": wins / len(PREFERRED), "pairs": len(PREFERRED)}
    (run / "alignment_report.json").write_text(json.dumps(report))
    print(f"alignment: win rate {report['win_rate']:.2f}")
    return report


def remove_scratch(**context: Any) -> None:
    """Cleanup: delete the tokenised features; checkpoints and reports stay."""
    shutil.rmtree(_run_dir(context["params"], context["run_id"]) / "scratch", ignore_errors=True)


# -------------------------------------------------------------------------------------------- DAG
NODE = {  # estimated duration, GPUs, GPU memory of each atomic node (on the real cluster)
    "load": ("10m", None, None),
    "preprocess": ("20m", 1, "16GiB"),
    "init": ("10m", 1, "16GiB"),
    "train": ("2h", TRAIN_GPUS, "40GiB"),
    "checkpoint": ("10m", None, None),
    "evaluate": ("20m", 1, "16GiB"),
}


def _node(stage: str, step: str, callable_: Any, **kwargs: Any) -> Any:
    duration, gpus, memory = NODE[step]
    op_kwargs = {"stage": stage, **kwargs.pop("op_kwargs", {})}
    if gpus is None:
        return PythonOperator(
            task_id=step,
            python_callable=callable_,
            op_kwargs=op_kwargs,
            executor_config=gpu_hints(duration=duration),
            **kwargs,
        )
    return GpuPythonOperator(
        task_id=step,
        python_callable=callable_,
        op_kwargs=op_kwargs,
        gpus=gpus,
        gpu_memory=memory,
        duration=duration,
        **kwargs,
    )


def _finetune_rung(rung: Rung) -> Any:
    return GpuPythonOperator(
        task_id=rung.name,
        python_callable=train,
        op_kwargs={"stage": "finetune", "accumulation": rung.params["accumulation"]},
        gpus=rung.gpus or 1,
        gpu_memory="40GiB",
        duration=rung.duration,
    )


with DAG(
    DAG_ID,
    schedule=None,
    catchup=False,
    doc_md=__doc__,
    tags=["gpu-dag", "example"],
    default_args={"weight_rule": CRITICAL_PATH_WEIGHT_RULE, "retries": 1},
    params={
        "model_size": Param("tiny", type="string", enum=sorted(MODEL_WIDTH), description="Model width."),
        "gpus": Param(
            TRAIN_GPUS,
            type="integer",
            minimum=1,
            maximum=TRAIN_GPUS,
            description=f"Data-parallel GPUs for the training loops (at most the {TRAIN_GPUS} declared).",
        ),
        "dataset_path": Param(
            "/tmp/airflow-gpu-dag/llm",
            type="string",
            minLength=1,
            pattern="^/",
            description="Absolute directory for the corpus, checkpoints and reports.",
        ),
    },
) as dag:
    clean = PythonOperator(
        task_id="clean_data",
        python_callable=clean_data,
        executor_config=gpu_hints(duration="30m", outputs=["{{ params.dataset_path }}/runs"]),
    )

    with TaskGroup("pretrain", tooltip="pre-training: six atomic nodes") as pretrain:
        pt_load = _node("pretrain", "load", load)
        pt_pre = _node("pretrain", "preprocess", preprocess)
        pt_init = _node("pretrain", "init", init_model)
        pt_train = _node("pretrain", "train", train)
        pt_ckpt = _node("pretrain", "checkpoint", checkpoint)
        pt_eval = _node("pretrain", "evaluate", evaluate)
        pt_load >> pt_pre >> pt_init >> pt_train >> pt_ckpt >> pt_eval

    with TaskGroup("finetune", tooltip="instruction fine-tuning: six atomic nodes") as finetune:
        ft_load = _node("finetune", "load", load)
        ft_pre = _node("finetune", "preprocess", preprocess)
        ft_init = _node("finetune", "init", init_model)
        ft_train = fallback_ladder(
            "train",
            [
                Rung("two_gpus", gpus=2, start_within="20m", duration="1h", params={"accumulation": 1}),
                Rung("one_gpu", gpus=1, duration="1h30m", params={"accumulation": 2}),
            ],
            _finetune_rung,
            tooltip="2 GPUs; if not started within 20 min, 1 GPU with gradient accumulation 2",
        )
        ft_ckpt = _node("finetune", "checkpoint", checkpoint)
        ft_eval = _node("finetune", "evaluate", evaluate)
        ft_load >> ft_pre >> ft_init >> ft_train >> ft_ckpt >> ft_eval

    align = GpuPythonOperator(
        task_id="alignment_eval",
        python_callable=alignment_eval,
        gpus=1,
        gpu_memory="16GiB",
        duration="30m",
    )
    scratch_cleanup = PythonOperator(
        task_id="remove_scratch",
        python_callable=remove_scratch,
        executor_config=gpu_hints(duration="10m"),
    )

    # data: pre-training reads the cleaned corpus only once it is complete (_SUCCESS marker)
    wait_corpus = data_edge(
        clean,
        pt_load,
        path="{{ params.dataset_path }}/runs/{{ run_id }}/clean",
        timeout=1800,
        poke_interval=5,
        task_id="wait_clean_corpus",
    )
    # budget: the pre-training loop waits while this run's GPU-hour budget is used up
    budget = budget_gate(pt_train, gpu_hours_per_run=40, poke_interval=10, task_id="train_budget")
    # control: fine-tune only a converged model (else the rest of the chain is skipped)
    convergence = validation_edge(pt_eval, ft_load, check=converged, on_invalid="skip")
    # gates and sensors take no GPU and (normally) no time: tell the planner
    for gate in (wait_corpus, budget, convergence):
        gate.executor_config = gpu_hints(duration=0)
    ft_eval >> align
    # cleanup: runs whatever happened to the work it cleans up after
    cleanup(scratch_cleanup, after=[align, pt_eval, ft_eval])
