"""A well-formed GPU training pipeline used by the CLI tests.

load (20m) -> preprocess (30m) -> train (2h, 4 GPUs) -> checkpoint (10m) -> evaluate (30m, 1 GPU)
load -> tokenizer_stats (15m, CPU) -> evaluate
preprocess -> ablation (1h, 2 GPUs) -> evaluate
load -> sweep_0..sweep_5 (45m, 1 GPU each) -> evaluate
Critical path: load, preprocess, train, checkpoint, evaluate = 3h30m. On 4 GPUs, stock admission lets
the 1-GPU sweeps take the GPUs while the 4-GPU ``train`` waits; reservation starts ``train`` first.
"""

from __future__ import annotations

import pendulum
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG

from airflow_gpu_dag import CRITICAL_PATH_WEIGHT_RULE, gpu_hints

with DAG(
    "gpu_pipeline",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    default_args={"weight_rule": CRITICAL_PATH_WEIGHT_RULE},
):
    load = EmptyOperator(task_id="load", executor_config=gpu_hints(duration="20m", outputs=["/data/raw"]))
    preprocess = EmptyOperator(
        task_id="preprocess",
        executor_config=gpu_hints(duration="30m", inputs=["/data/raw"], outputs=["/data/clean"]),
    )
    train = EmptyOperator(
        task_id="train",
        pool="gpu_default",
        pool_slots=4,
        executor_config=gpu_hints(duration="2h", gpus=4, gpu_memory="80GiB", inputs=["/data/clean"]),
    )
    checkpoint = EmptyOperator(task_id="checkpoint", executor_config=gpu_hints(duration="10m"))
    evaluate = EmptyOperator(
        task_id="evaluate",
        pool="gpu_default",
        pool_slots=1,
        executor_config=gpu_hints(duration="30m", gpus=1),
    )
    tokenizer_stats = EmptyOperator(task_id="tokenizer_stats", executor_config=gpu_hints(duration="15m"))
    ablation = EmptyOperator(
        task_id="ablation", pool="gpu_default", pool_slots=2, executor_config=gpu_hints(duration="1h", gpus=2)
    )
    for i in range(6):
        sweep = EmptyOperator(
            task_id=f"sweep_{i}",
            pool="gpu_default",
            pool_slots=1,
            executor_config=gpu_hints(duration="45m", gpus=1),
        )
        load >> sweep >> evaluate
    load >> preprocess >> train >> checkpoint >> evaluate
    load >> tokenizer_stats >> evaluate
    preprocess >> ablation >> evaluate
