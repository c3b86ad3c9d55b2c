"""``GpuKubernetesPodOperator``: a cncf-kubernetes ``KubernetesPodOperator`` that asks for GPUs.

It is the provider's ``KubernetesPodOperator`` (pod creation, logs, XCom, deferral, cleanup are all
the provider's) plus the GPU mapping of :mod:`airflow_gpu_dag.kubernetes`::

    from airflow_gpu_dag.operators.kubernetes import GpuKubernetesPodOperator

    train = GpuKubernetesPodOperator(
        task_id="train",
        image="ghcr.io/acme/train:1.4",
        cmds=["python", "train.py"],
        gpus=8,                      # nvidia.com/gpu requests = limits = 8; pool_slots = 8
        gpu_memory="80GiB",          # node affinity nvidia.com/gpu.memory > 81919
        gpu_type="a100",             # node affinity nvidia.com/gpu.product In [NVIDIA-A100-...]
        duration="3h",               # estimate for the critical-path priority
        datasets=["c4-en"],          # prefer nodes labelled gpu-dag.io/dataset-c4-en
        critical_priority_class="gpu-critical",   # priorityClassName when the task is critical
        volcano=True, volcano_queue="training",   # or kueue=True, kueue_queue="team-a"
        schedule_timeout_seconds=1200,            # not scheduled in 20 min -> NotStartedInTime
    )

What it sets (merged into anything you pass, never replacing it):

- ``container_resources``: ``nvidia.com/gpu`` requests = limits = ``gpus``;
- ``affinity``: required ``nvidia.com/gpu.product In [...]`` for ``gpu_type`` (mapping
  :data:`~airflow_gpu_dag.kubernetes.pod_spec.DEFAULT_GPU_PRODUCTS`, override with
  ``gpu_products=``), required ``nvidia.com/gpu.memory`` for ``gpu_memory``, and data affinity on
  ``gpu-dag.io/dataset-<name>`` (``data_affinity="prefer"`` or ``"require"``);
- ``tolerations``: ``nvidia.com/gpu`` Exists NoSchedule;
- ``pool``/``pool_slots``: ``gpu_<type>`` (or ``gpu_default``) and ``gpus``;
- ``executor_config``: the GPU hints (:func:`airflow_gpu_dag.executor_config.gpu_hints`), merged;
- ``priorityClassName`` (when you did not give ``priority_class_name``): ``critical_priority_class``
  if the task has zero slack in the DAG's critical-path analysis, else ``noncritical_priority_class``;
- Volcano mode: ``schedulerName: volcano``, the queue annotation, and for a *gang* (several tasks of
  one run that must start together: same ``volcano_gang`` key, ``volcano_gang_size`` pods) a
  PodGroup (``minMember`` = gang size, queue, priority class, ``minResources``) created through the
  hook's custom objects API and the ``scheduling.k8s.io/group-name`` annotation; or an existing
  PodGroup referenced with ``volcano_pod_group=``;
- Kueue mode: the ``kueue.x-k8s.io/queue-name`` label (plus pod-group metadata when asked);
- budget: when the pod ends, GPUs x its container's run time is charged to the budget ledger
  (:func:`~airflow_gpu_dag.kubernetes.usage.charge_finished_pod`).

A pod that is not *scheduled* within ``schedule_timeout_seconds`` (no node with free GPUs, a Kueue
gate that was not lifted, a Volcano gang that does not fit) is deleted — whatever
``on_finish_action`` says, so it cannot start later and take GPUs a fallback needs — and the task
fails with :class:`GpuPodNotScheduled` (a :class:`~airflow_gpu_dag.operators.fallback.NotStartedInTime`:
no retries, and the reason recorded for :func:`~airflow_gpu_dag.authoring.fallback.fallback_ladder`). A pod
that was scheduled but did not start (image pull, ...) fails as in the provider, with retries.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Iterable, Mapping, Sequence
from contextlib import suppress
from typing import TYPE_CHECKING, Any

from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
from airflow.providers.cncf.kubernetes.pod_generator import PodGenerator
from airflow.providers.cncf.kubernetes.utils.pod_manager import PodLaunchTimeoutException
from airflow.sdk.exceptions import AirflowException
from kubernetes.client import models as k8s

from airflow_gpu_dag.airflow.dag_reader import build_task_graph
from airflow_gpu_dag.airflow.declaring import partial_default
from airflow_gpu_dag.core.analysis.critical_path import analyze
from airflow_gpu_dag.kubernetes.kueue import POD_GROUP_LABEL, KueueError, kueue_pod_metadata
from airflow_gpu_dag.kubernetes.pod_kwargs import (
    GPU_ARGS,
    GpuPodConfigError,
    gpu_pod_kwargs,
    parse_pod_spec,
    pod_where,
    with_defaults,
    with_gpu_parts,
)
from airflow_gpu_dag.kubernetes.pod_spec import merge_affinity, merge_resources, merge_tolerations
from airflow_gpu_dag.kubernetes.usage import charge_finished_pod
from airflow_gpu_dag.kubernetes.volcano import (
    GROUP_NAME_ANNOTATION,
    OBJECT_NAME,
    QUEUE_ANNOTATION,
    VOLCANO_SCHEDULER,
    PodGroupError,
    ensure_podgroup,
    gang_podgroup_name,
    podgroup_manifest,
)
from airflow_gpu_dag.operators.fallback import NotStartedInTime, mark_not_started
from airflow_gpu_dag.operators.gpu_partial import check_unmapped_request, from_mapped, gpu_partial

if TYPE_CHECKING:
    from airflow.sdk import Context

log = logging.getLogger(__name__)

__all__ = ["GpuKubernetesPodOperator", "GpuPodConfigError", "GpuPodNotScheduled", "gpu_pod_kwargs"]


class GpuPodNotScheduled(NotStartedInTime):
    """The GPU pod was not scheduled within ``schedule_timeout_seconds`` (it never started)."""


def _pod_scheduled(pod: Any) -> bool:
    """True when the API says the pod is bound to a node (or already past Pending)."""
    status = getattr(pod, "status", None)
    if status is None:
        return False
    if status.phase not in (None, "Pending", "Unknown"):
        return True
    return any(c.type == "PodScheduled" and c.status == "True" for c in (status.conditions or []))


def _kueue_metadata(
    where: str, queue: Any, pod_group: Any, pod_group_size: Any, priority_class: Any
) -> tuple[dict[str, str], dict[str, str]]:
    """The Kueue labels and annotations of a pod (:func:`kueue_pod_metadata`), its errors named for the
    task (``where``): what the constructor and ``.partial()`` both check."""
    try:
        return kueue_pod_metadata(
            queue, pod_group=pod_group, pod_group_size=pod_group_size, workload_priority_class=priority_class
        )
    except KueueError as err:
        raise GpuPodConfigError(f"{where}: {err}") from None


class GpuKubernetesPodOperator(KubernetesPodOperator):
    """A ``KubernetesPodOperator`` for GPU work (see the module docstring).

    :param gpus: whole GPUs (>= 1).
    :param gpu_memory: memory per GPU (``"80GiB"``, ``"40G"``, int MiB) or None.
    :param gpu_type: GPU type (``"a100"``, ``"h100"`` ...; keys of ``gpu_products``) or None = any.
    :param duration: estimated run time for the critical-path priority (``"2h"``).
    :param datasets: datasets the pod reads; data affinity on ``gpu-dag.io/dataset-<name>``.
    :param data_affinity: ``"prefer"`` or ``"require"`` nodes that hold the datasets.
    :param gpu_products: override of our type names -> ``nvidia.com/gpu.product`` values.
    :param gpu_memory_affinity: require ``nvidia.com/gpu.memory`` >= ``gpu_memory`` (GFD label).
    :param inputs: dataset paths read (hints, hidden-dependency check).
    :param outputs: dataset paths written.
    :param critical_priority_class: ``priorityClassName`` when the task is on the critical path.
    :param noncritical_priority_class: ``priorityClassName`` otherwise.
    :param volcano: hand the pod to Volcano (``schedulerName: volcano``).
    :param volcano_queue: Volcano queue (required in Volcano mode unless ``volcano_pod_group`` names
        an existing PodGroup, which carries its own queue). Use ``"default"`` for Volcano's default.
    :param volcano_gang: key shared by the tasks of one run that must start together; the PodGroup
        is named from (dag_id, run_id, key) and created by whichever task comes first.
    :param volcano_gang_size: pods in the gang (PodGroup ``minMember``).
    :param volcano_pod_group: name of an existing PodGroup to join instead.
    :param kueue: hand the pod to Kueue (label ``kueue.x-k8s.io/queue-name``).
    :param kueue_queue: the Kueue ``LocalQueue`` (required in Kueue mode).
    :param kueue_pod_group: Kueue pod group key (pods of one run admitted together; the label is per run) ...
    :param kueue_pod_group_size: ... and its size.
    :param kueue_priority_class: a Kueue ``WorkloadPriorityClass``.
    """

    #: Read by :func:`airflow_gpu_dag.authoring.fallback.fallback_ladder`: this task reports "not started"
    #: itself (pod not scheduled), and its ``schedule_timeout_seconds`` is the rung's deadline.
    reports_not_started = True

    def __init__(
        self,
        *,
        gpus: int,
        gpu_memory: object = None,
        gpu_type: str | None = None,
        duration: object = None,
        datasets: Iterable[str] | str = (),
        data_affinity: str = "prefer",
        gpu_products: Mapping[str, Sequence[str]] | None = None,
        gpu_memory_affinity: bool = True,
        inputs: Iterable[str] = (),
        outputs: Iterable[str] = (),
        critical_priority_class: str | None = None,
        noncritical_priority_class: str | None = None,
        volcano: bool = False,
        volcano_queue: str | None = None,
        volcano_gang: str | None = None,
        volcano_gang_size: int = 1,
        volcano_pod_group: str | None = None,
        kueue: bool = False,
        kueue_queue: str | None = None,
        kueue_pod_group: str | None = None,
        kueue_pod_group_size: int | None = None,
        kueue_priority_class: str | None = None,
        **kwargs: Any,
    ) -> None:
        where = pod_where(kwargs)
        kwargs = with_defaults(kwargs)
        self._check_modes(
            where,
            volcano=volcano,
            volcano_queue=volcano_queue,
            volcano_gang=volcano_gang,
            volcano_gang_size=volcano_gang_size,
            volcano_pod_group=volcano_pod_group,
            kueue=kueue,
            kueue_queue=kueue_queue,
            kueue_pod_group=kueue_pod_group,
            kueue_pod_group_size=kueue_pod_group_size,
            kueue_priority_class=kueue_priority_class,
            schedulername=kwargs.get("schedulername"),
        )

        spec = parse_pod_spec(
            kwargs, gpus, gpu_memory, gpu_type, datasets, data_affinity, gpu_products, gpu_memory_affinity
        )
        check_unmapped_request(kwargs, spec.gpus, spec.gpu_type, mapped=from_mapped(self))
        merged = with_gpu_parts(spec, kwargs, duration=duration, inputs=inputs, outputs=outputs)

        labels = dict(merged.get("labels") or {})
        annotations = dict(merged.get("annotations") or {})
        if kueue:
            k_labels, k_annotations = _kueue_metadata(
                where, kueue_queue, kueue_pod_group, kueue_pod_group_size, kueue_priority_class
            )
            labels.update(k_labels)
            annotations.update(k_annotations)

        if volcano:
            merged["schedulername"] = VOLCANO_SCHEDULER
            if volcano_queue:
                annotations[QUEUE_ANNOTATION] = volcano_queue
            if volcano_pod_group:
                annotations[GROUP_NAME_ANNOTATION] = volcano_pod_group

        merged["labels"] = labels
        merged["annotations"] = annotations
        super().__init__(**merged)

        self.gpus = int(merged["container_resources"].limits["nvidia.com/gpu"])
        self.critical_priority_class = critical_priority_class
        self.noncritical_priority_class = noncritical_priority_class
        self.volcano = volcano
        self.volcano_queue = volcano_queue
        self.volcano_gang = volcano_gang
        self.volcano_gang_size = volcano_gang_size
        self.volcano_pod_group = volcano_pod_group
        self.kueue = kueue
        self.kueue_queue = kueue_queue
        self.kueue_pod_group = kueue_pod_group
        self._not_scheduled: str | None = None
        self._gpu_pod_spec = spec  # for a pod template: merged into the fields the task does not give
        self._template_kept = tuple(
            f for f in ("tolerations", "affinity", "container_resources") if not kwargs.get(f)
        )

    @classmethod
    def partial(cls, **kwargs: Any) -> Any:  # type: ignore[override]
        """``GpuKubernetesPodOperator.partial(task_id=..., gpus=4, ...).expand(...)``: checked, and with
        its pool, slots and hints, at parse time (no operator is built then for a mapped task, so
        without this it ran in ``default_pool`` with one slot and no hints)."""
        where = pod_where(kwargs)
        if "gpus" not in kwargs:
            raise GpuPodConfigError(
                f"{where}: give gpus= in .partial(): a mapped task's GPUs (its pool slots) are the same "
                "for every instance and must be known when the DAG is parsed"
            )

        parameters = inspect.signature(cls.__init__).parameters
        modes = {
            name: kwargs.get(name, parameters[name].default)
            for name in parameters
            if name.startswith(("volcano", "kueue"))
        }
        cls._check_modes(where, **modes, schedulername=kwargs.get("schedulername"))
        if modes.get("kueue"):  # the labels' values too, as the operator's constructor checks them
            _kueue_metadata(
                where,
                modes.get("kueue_queue"),
                modes.get("kueue_pod_group"),
                modes.get("kueue_pod_group_size"),
                modes.get("kueue_priority_class"),
            )

        gpu_args = {name: kwargs[name] for name in GPU_ARGS if name in kwargs}
        merged = gpu_pod_kwargs(
            **gpu_args,
            task_id=kwargs.get("task_id"),
            dag=kwargs.get("dag"),
            pool=kwargs.get("pool"),
            pool_slots=kwargs.get("pool_slots"),
            executor_config=partial_default(kwargs, "executor_config"),
        )
        scheduling = {key: merged[key] for key in ("pool", "pool_slots", "executor_config")}
        return gpu_partial(cls, {**kwargs, **scheduling})

    @staticmethod
    def _check_modes(where: str, **m: Any) -> None:
        def fail(msg: str) -> None:
            raise GpuPodConfigError(f"{where}: {msg}")

        if m["volcano"] and m["kueue"]:
            fail(
                "volcano=True and kueue=True: a pod has one batch scheduler; choose Volcano (gang "
                "scheduling, queues) or Kueue (quota admission), not both"
            )
        if not m["volcano"] and (
            any(m[k] is not None for k in ("volcano_queue", "volcano_gang", "volcano_pod_group"))
            or m["volcano_gang_size"] != 1
            or isinstance(m["volcano_gang_size"], bool)  # True == 1, but it was given
        ):
            fail(
                "volcano_queue/volcano_gang/volcano_gang_size/volcano_pod_group only apply with "
                "volcano=True; add volcano=True"
            )

        if m["kueue_pod_group_size"] is not None and not m["kueue_pod_group"]:
            fail("kueue_pod_group_size needs kueue_pod_group='<name shared by the group's pods>'")
        if not m["kueue"] and any(
            m[k] is not None
            for k in ("kueue_queue", "kueue_pod_group", "kueue_pod_group_size", "kueue_priority_class")
        ):
            fail(
                "kueue_queue/kueue_pod_group/kueue_priority_class only apply with kueue=True; add kueue=True"
            )
        if m["kueue"] and not m["kueue_queue"]:
            fail("kueue=True needs kueue_queue='<LocalQueue name>' (the kueue.x-k8s.io/queue-name label)")

        if m["volcano"]:
            if m["schedulername"] not in (None, VOLCANO_SCHEDULER):
                fail(
                    f"volcano=True sets schedulername='volcano'; remove schedulername={m['schedulername']!r}"
                )
            if m["volcano_pod_group"] and m["volcano_gang"]:
                fail(
                    "give either volcano_gang (PodGroup created per run) or volcano_pod_group (existing), "
                    "not both"
                )
            if not m["volcano_queue"] and not m["volcano_pod_group"]:
                fail(
                    "volcano=True needs volcano_queue='<queue>' (use 'default' for Volcano's default queue), "
                    "or volcano_pod_group='<existing PodGroup>' that names its queue"
                )
            size = m["volcano_gang_size"]
            if isinstance(size, bool) or not isinstance(size, int) or size < 1:
                fail(f"volcano_gang_size={size!r} must be an int >= 1 (pods that start together)")
            if size > 1 and not m["volcano_gang"]:
                fail(f"volcano_gang_size={size} needs volcano_gang='<key shared by the gang's tasks>'")
            for name in ("volcano_gang", "volcano_pod_group"):
                if m[name] is not None and not str(m[name]).strip():
                    fail(f"{name} must be a non-empty name")
            group = m["volcano_pod_group"]
            if group and (not isinstance(group, str) or len(group) > 253 or not OBJECT_NAME.match(group)):
                fail(
                    f"volcano_pod_group={group!r} cannot name a PodGroup: Kubernetes object names are "
                    "lower-case letters, digits, '-' and '.', at most 253 characters (kubectl get podgroups)"
                )

    # -- derived at run time ------------------------------------------------------------------

    def _critical_priority_class(self) -> str | None:
        """``critical_priority_class`` / ``noncritical_priority_class`` from the DAG's CPM slack."""
        if not (self.critical_priority_class or self.noncritical_priority_class):
            return None
        try:
            graph, _ = build_task_graph(self.dag)
            critical = analyze(graph).timings[self.task_id].critical
        except Exception:
            self.log.warning("critical-path analysis failed for %s; no derived priority class", self.task_id)
            return self.noncritical_priority_class
        return self.critical_priority_class if critical else self.noncritical_priority_class

    def pod_group_name(self, context: Context | None) -> str | None:
        """The PodGroup this pod joins: the gang's (per run) or the referenced one, else None."""
        if not self.volcano:
            return None
        if self.volcano_pod_group:
            return self.volcano_pod_group
        if self.volcano_gang:
            run_id = str(context["run_id"]) if context else "dry-run"
            return gang_podgroup_name(self.dag_id, run_id, self.volcano_gang)
        return None

    def podgroup_manifest(self, context: Context | None, namespace: str | None) -> dict[str, Any] | None:
        """The PodGroup to create for a gang (None when there is none to create)."""
        name = self.pod_group_name(context)
        if not name or not self.volcano_gang:
            return None
        return podgroup_manifest(
            name,
            namespace=namespace,
            min_member=self.volcano_gang_size,
            queue=self.volcano_queue,
            priority_class_name=self.priority_class_name or self._critical_priority_class(),
            min_resources={"nvidia.com/gpu": str(self.gpus * self.volcano_gang_size)},
            labels={"app.kubernetes.io/managed-by": "airflow-gpu-dag"},
        )

    def build_pod_request_obj(self, context: Context | None = None, *, dry_run: bool = False) -> k8s.V1Pod:
        """The provider's pod, plus the derived priority class and the PodGroup annotation."""
        pod = super().build_pod_request_obj(context, dry_run=dry_run)
        self._merge_into_template_fields(pod)

        if not pod.spec.priority_class_name:
            derived = self._critical_priority_class()
            if derived:
                pod.spec.priority_class_name = derived

        group = self.pod_group_name(context)
        if group:
            pod.metadata.annotations = {**(pod.metadata.annotations or {}), GROUP_NAME_ANNOTATION: group}
        if self.kueue and self.kueue_pod_group:  # a Kueue pod group per run, like a Volcano gang's PodGroup
            run_id = str(context["run_id"]) if context else "dry-run"
            group = gang_podgroup_name(self.dag_id, run_id, self.kueue_pod_group)
            pod.metadata.labels = {**(pod.metadata.labels or {}), POD_GROUP_LABEL: group}
        return pod

    def _merge_into_template_fields(self, pod: k8s.V1Pod) -> None:
        """Keep a pod template's tolerations, affinity and base container resources, with the GPU parts
        merged in. The provider lets the operator's values replace the template's, and this operator
        always has its own (the GPU toleration, node affinity and GPU count): without this a template's
        toleration of a tainted node pool or its memory request was silently dropped."""
        if self.pod_template_file:
            template = PodGenerator.deserialize_model_file(self.pod_template_file)
        elif self.pod_template_dict:
            template = PodGenerator.deserialize_model_dict(self.pod_template_dict)
        else:
            template = self.full_pod_spec

        spec = getattr(template, "spec", None)
        if spec is None or pod.spec is None:
            return

        kept = getattr(self, "_template_kept", ())
        gpu = self._gpu_pod_spec
        if "tolerations" in kept and spec.tolerations:
            pod.spec.tolerations = merge_tolerations(
                [*spec.tolerations, *(t for t in pod.spec.tolerations or () if t not in spec.tolerations)]
            )
        if "affinity" in kept and spec.affinity:
            pod.spec.affinity = merge_affinity(
                spec.affinity, gpu.required_node_requirements(), gpu.preferred_terms()
            )
        if "container_resources" in kept:
            name = self.base_container_name
            given = next((c for c in spec.containers or () if c.name == name), None)
            final = next((c for c in pod.spec.containers or () if c.name == name), None)
            if given is not None and given.resources is not None and final is not None:
                final.resources = merge_resources(given.resources, self.gpus)

    def get_or_create_pod(self, pod_request_obj: k8s.V1Pod, context: Context) -> k8s.V1Pod:
        """Create the gang's PodGroup (idempotent) before the provider creates the pod."""
        try:
            manifest = self.podgroup_manifest(context, pod_request_obj.metadata.namespace)
        except PodGroupError as err:
            raise AirflowException(f"{self.dag_id}.{self.task_id}: {err}") from None
        if manifest is not None:
            created = ensure_podgroup(self.hook, manifest, pod_request_obj.metadata.namespace)
            self.log.info(
                "PodGroup %s %s (minMember=%s)",
                manifest["metadata"]["name"],
                "created" if created else "already exists",
                manifest["spec"]["minMember"],
            )
        return super().get_or_create_pod(pod_request_obj, context)

    # -- "not scheduled in time" -> NotStartedInTime -------------------------------------------

    def _not_scheduled_message(self, pod: Any) -> str:
        name = getattr(getattr(pod, "metadata", None), "name", "?")
        return (
            f"pod {name} of {self.dag_id}.{self.task_id} ({self.gpus} GPU) was not scheduled within "
            f"{self.schedule_timeout_seconds}s: no node could take it (GPUs busy, queue/quota full)"
        )

    def await_pod_start(self, pod: k8s.V1Pod) -> None:
        """The provider's wait; a pod still unscheduled at the timeout raises :class:`GpuPodNotScheduled`."""
        try:
            super().await_pod_start(pod)
        except PodLaunchTimeoutException as err:
            remote = None
            with suppress(Exception):
                remote = self.pod_manager.read_pod(pod)
            unscheduled = (not _pod_scheduled(remote)) if remote is not None else "scheduled" in str(err)
            if not unscheduled:
                raise
            self._not_scheduled = self._not_scheduled_message(pod)
            raise GpuPodNotScheduled(self._not_scheduled) from err

    def cleanup(
        self,
        pod: k8s.V1Pod,
        remote_pod: k8s.V1Pod,
        xcom_result: dict | None = None,
        context: Context | None = None,
    ) -> None:
        """Delete a never-scheduled pod whatever ``on_finish_action`` says; else charge the pod's GPU
        time to the budget ledger (GPUs x its container's run time) and run the provider's cleanup."""
        if self._not_scheduled is None:
            if remote_pod is not None and not self._killed:
                self._charge(remote_pod, context)
            super().cleanup(pod, remote_pod, xcom_result=xcom_result, context=context)
            return
        target = remote_pod or pod
        if target is not None:
            self.log.warning("Deleting unscheduled pod %s so it cannot start later", target.metadata.name)
            try:
                self.pod_manager.delete_pod(target)
            except Exception:
                self.log.exception("Could not delete unscheduled pod %s", target.metadata.name)

    def _charge(self, pod: k8s.V1Pod, context: Context | None) -> None:
        charge_finished_pod(
            pod,
            gpus=self.gpus,
            context=context,
            pool=self.pool,
            container=self.base_container_name,
            reread=lambda stale: self.pod_manager.read_pod(stale),  # the client only when needed
        )

    def on_kill(self) -> None:
        """Charge the pod's GPU time so far, then the provider's kill (it deletes the pod, after
        which its run time could no longer be read: a killed pod was charged nothing)."""
        if self.pod is not None and not self._killed:
            # the ids of execute's context: the pod's labels are sanitized (run_id) and lack the try
            self._charge(self.pod, getattr(self, "_run_context", None))
        super().on_kill()

    def execute(self, context: Context) -> Any:
        self._run_context = context  # for on_kill's charge
        try:
            return super().execute(context)
        except GpuPodNotScheduled as err:
            mark_not_started(context, str(err))
            raise

    def trigger_reentry(self, context: Context, event: dict[str, Any]) -> Any:
        """Deferrable mode: a ``timeout`` event for a pod that is still unscheduled is "not started"."""
        self._run_context = context  # for on_kill's charge
        if event.get("status") == "timeout":
            with suppress(Exception):
                remote = self.hook.get_pod(event["name"], event["namespace"])
                if remote is not None and not _pod_scheduled(remote):
                    self._not_scheduled = self._not_scheduled_message(remote)
        try:
            return super().trigger_reentry(context, event)
        except AirflowException as err:
            if self._not_scheduled is None or isinstance(err, GpuPodNotScheduled):
                raise
            mark_not_started(context, self._not_scheduled)
            raise GpuPodNotScheduled(self._not_scheduled) from err
