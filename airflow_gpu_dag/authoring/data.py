"""Data edges: producer -> completeness sensor -> consumer, through an Airflow Asset.

    from airflow.sdk import Asset
    from airflow_gpu_dag.authoring import data_edge, dataset_path

    clean = Asset("clean_corpus", uri="file:///lake/clean")
    wait = data_edge(preprocess, pretrain, path="/lake/clean/{{ ds_nodash }}", asset=clean,
                     completeness="manifest", timeout=timedelta(hours=1))
    # pretrain reads the verified path: bash_command="train --data " + dataset_path(wait)

The graph view shows ``preprocess -data-> wait_clean_corpus -data-> pretrain``. The consumer starts
only when the dataset is complete (marker / manifest / stable sizes), not when the producer exited.
With ``fallback_to_last_good=True`` a failed producer does not block the consumer if an earlier
complete artifact of the asset exists (see :class:`~airflow_gpu_dag.sensors.DatasetCompleteSensor`);
without it the consumer is blocked (``upstream_failed``) after the producer's retries are spent.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from airflow.sdk import Asset

from airflow_gpu_dag.authoring._wiring import labelled, require_dag
from airflow_gpu_dag.sensors._common import RESUME_RACE_RETRIES, RESUME_RACE_RETRY_DELAY
from airflow_gpu_dag.sensors.dataset import DatasetCompleteSensor

__all__ = ["DATA", "data_edge", "dataset_path"]

#: Edge label of data edges.
DATA = "data"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]+", "_", text).strip("_")[:60] or "dataset"


def data_edge(
    producer: Any,
    consumer: Any,
    *,
    path: Any,
    timeout: float | timedelta | None = None,
    asset: Asset | None = None,
    completeness: object = "marker",
    fallback_to_last_good: bool = False,
    poke_interval: float = 10.0,
    conn_id: str | None = None,
    task_id: str | None = None,
    deferrable: bool = True,
) -> DatasetCompleteSensor:
    """Wire ``producer -data-> <completeness sensor> -data-> consumer`` and return the sensor.

    :param path: where the producer writes the dataset (templated, e.g. per run with ``{{ ds }}``).
    :param timeout: required: how long the consumer may wait for a complete dataset.
    :param asset: the Asset to record complete versions in (required for the fallback).
    :param fallback_to_last_good: opt-in: continue on the newest earlier complete artifact when
        the producer failed; the sensor's XCom says ``fallback: true``.
    """
    dag = require_dag(producer, "data_edge")
    name = asset.name if asset is not None else _slug(str(path).rsplit("/", 1)[-1] or str(path))
    sensor = DatasetCompleteSensor(
        task_id=task_id or f"wait_{_slug(name)}",
        path=path,
        completeness=completeness,
        timeout=timeout,
        poke_interval=poke_interval,
        conn_id=conn_id,
        asset=asset,
        fallback_to_last_good=fallback_to_last_good,
        producer_task_id=producer.task_id if fallback_to_last_good else None,
        deferrable=deferrable,
        dag=dag,
        retries=RESUME_RACE_RETRIES,
        retry_delay=RESUME_RACE_RETRY_DELAY,
    )
    labelled(producer, sensor, DATA)
    labelled(sensor, consumer, DATA)
    return sensor


def dataset_path(sensor: Any) -> str:
    """Jinja expression for the verified dataset path the sensor returned (for templated fields)."""
    task_id = sensor if isinstance(sensor, str) else sensor.task_id
    return "{{ ti.xcom_pull(task_ids='" + task_id + "')['path'] }}"
