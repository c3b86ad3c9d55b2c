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

Lineage (optional): with ``apache-airflow-providers-openlineage`` installed (``pip install
airflow-gpu-dag[openlineage]``), the producer gets the dataset as an outlet and the consumer as an
inlet, as the OpenLineage dataset the provider makes of the asset (or of the path's static part), so
the lineage graph shows ``producer -> dataset -> consumer`` (the sensor, which emits the Airflow asset
events, reads and writes the same dataset). The producer's outlet is an OpenLineage dataset, not the
Airflow asset: an asset outlet would emit asset events when the producer exits, before the data is
known to be complete.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from airflow.sdk import Asset
from airflow.sdk.exceptions import DuplicateTaskIdFound

from airflow_gpu_dag.authoring._wiring import as_operator, labelled, require_dag
from airflow_gpu_dag.datasets.completeness import storage_url
from airflow_gpu_dag.sensors.dataset import DatasetCompleteSensor

__all__ = ["DATA", "data_edge", "dataset_path"]

#: Edge label of data edges.
DATA = "data"


#: A Jinja expression, statement or comment.
_TEMPLATE = re.compile(r"\{\{.*?\}\}|\{%.*?%\}|\{#.*?#\}")


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]+", "_", text).strip("_")[:60] or "dataset"


def _path_name(path: Any) -> str:
    """What the sensor of ``path`` is named after: its last segment, or, when that is only a template
    (``/lake/clean/{{ run_id }}``), the last segment with static text (``clean``). A last segment with
    static text (``part_{{ ds }}``), a trailing ``/`` or a path with nothing static name it as before."""
    text = str(path)
    last = text.rsplit("/", 1)[-1]
    if last and not re.search(r"[A-Za-z0-9]", _TEMPLATE.sub("", last)):
        for segment in reversed(text.split("/")[:-1]):
            if re.search(r"[A-Za-z0-9]", _TEMPLATE.sub("", segment)) and not segment.endswith(":"):
                return _slug(segment)
    return _slug(last or text)


def _taken(dag: Any, producer: Any, consumer: Any, task_id: str, name: str, asset: Asset | None) -> str:
    """The error for a sensor id ``task_id`` the DAG already has: the DAG, both tasks, the fix."""
    same = [t for t in dag.task_dict if t == task_id or t.endswith("." + task_id)]  # or in a TaskGroup
    task_id = same[0] if len(same) == 1 else task_id
    existing = dag.task_dict.get(task_id)
    what = f"a task {task_id!r}"
    if isinstance(existing, DatasetCompleteSensor):
        ups = ", ".join(sorted(map(repr, existing.upstream_task_ids))) or "nothing"
        downs = ", ".join(sorted(map(repr, existing.downstream_task_ids))) or "nothing"
        what = f"the sensor {task_id!r} of {existing.path!r} (between {ups} and {downs})"
    cause = f"asset {asset.name!r}" if asset is not None else "the same path segment"
    suggestion = f"wait_{name}_for_{_slug(consumer.task_id)}"
    return (
        f"DAG {dag.dag_id!r}: data_edge({producer.task_id!r} -> {consumer.task_id!r}) names its "
        f"completeness sensor {task_id!r}, but the DAG already has {what}: two data edges with {cause} "
        f"get the same sensor name. Fix: pass task_id={suggestion!r} (any id unique in the DAG) to this "
        "data_edge, or a distinct asset= (the sensor is named wait_<asset name>)."
    )


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
    deferrable: bool | None = None,
) -> DatasetCompleteSensor:
    """Wire ``producer -data-> <completeness sensor> -data-> consumer`` and return the sensor.

    :param path: where the producer writes the dataset (templated, e.g. per run with ``{{ ds }}``).
        The sensor is named ``wait_<asset name>``, else ``wait_<last segment of path>``; a last
        segment that is only a template is skipped (``/lake/clean/{{ run_id }}`` -> ``wait_clean``).
    :param timeout: required: how long the consumer may wait for a complete dataset.
    :param asset: the Asset to record complete versions in (required for the fallback).
    :param fallback_to_last_good: opt-in: continue on the newest earlier complete artifact when
        the producer failed; the sensor's XCom says ``fallback: true``.
    :param task_id: the sensor's task id instead (needed when that name is taken in the DAG).
    :param deferrable: the sensor waits in the triggerer; default ``[operators] default_deferrable``
        (False unless set), also through the DAG's ``default_args``.
    :raises ValueError: the sensor's name is already taken in the DAG (the message names the DAG,
        the producer, the consumer and the fix: pass ``task_id=`` or a distinct ``asset=``).
    """
    producer, consumer = as_operator(producer), as_operator(consumer)
    dag = require_dag(producer, "data_edge")
    name = _slug(asset.name if asset is not None else _path_name(path))  # slugged twice, as before
    sensor_id = task_id or f"wait_{name}"
    if sensor_id in dag.task_dict:  # checked before Airflow's DuplicateTaskIdFound, with the fix
        raise ValueError(_taken(dag, producer, consumer, sensor_id, name, asset))
    try:
        sensor = DatasetCompleteSensor(
            task_id=sensor_id,
            path=path,
            completeness=completeness,
            timeout=timeout,
            poke_interval=poke_interval,
            conn_id=conn_id,
            asset=asset,
            fallback_to_last_good=fallback_to_last_good,
            producer_task_id=producer.task_id if fallback_to_last_good else None,
            dag=dag,
            # not given: the DAG's default_args, else [operators] default_deferrable
            **({} if deferrable is None else {"deferrable": deferrable}),
        )
    except DuplicateTaskIdFound as err:  # inside a TaskGroup: the id gets the group's prefix
        raise ValueError(_taken(dag, producer, consumer, sensor_id, name, asset)) from err
    labelled(producer, sensor, DATA)
    labelled(sensor, consumer, DATA)
    dataset = lineage_dataset(asset.uri if asset is not None else _static_uri(path))
    if dataset is not None:
        producer.outlets = [*list(producer.outlets or []), dataset]
        consumer.inlets = [*list(consumer.inlets or []), dataset]
    return sensor


def _static_uri(path: Any) -> str | None:
    """The URI of the part of ``path`` before any template (``/lake/clean/{{ ds }}`` -> ``file:///lake/clean``)."""
    text = storage_url(path)[0].split("{{", 1)[0].rstrip("/")  # an ObjectStoragePath: no conn@ in it
    if not text or text.endswith(":/") or text.endswith(":"):
        return None
    return text if "://" in text else "file://" + text


def lineage_dataset(uri: str | None) -> Any:
    """The OpenLineage dataset of ``uri`` as the OpenLineage provider names it (its asset converter,
    else its object-storage rule), or None when the provider is not installed."""
    if not uri:
        return None
    try:  # optional dependency: the openlineage extra
        from airflow.providers.openlineage.extractors.manager import ExtractorManager  # optional dependency
        from airflow.providers.openlineage.utils.utils import translate_airflow_asset
    except ImportError:
        return None
    try:
        dataset = translate_airflow_asset(Asset(uri=uri), None)
    except Exception:  # a scheme the provider has no converter for
        dataset = None
    return dataset or ExtractorManager.convert_to_ol_dataset_from_object_storage_uri(uri)


def dataset_path(sensor: Any) -> str:
    """Jinja expression for the verified dataset path the sensor returned (for templated fields)."""
    task_id = sensor if isinstance(sensor, str) else sensor.task_id
    return "{{ ti.xcom_pull(task_ids='" + task_id + "')['path'] }}"
