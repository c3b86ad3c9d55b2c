"""The ``kubernetes`` capacity source: allocatable GPUs on matching nodes minus what pods that are not
Airflow's request there.

Nodes count when Ready and schedulable. A pod's GPU request is what the kube-scheduler reserves for
it: the larger of its app containers' sum (plus restartable "sidecar" init containers) and its
largest init container (plus the sidecars started before it); requests, else limits (for extended
resources such as ``nvidia.com/gpu`` a limit alone sets the request). Quantities are read with
``kubernetes.utils.parse_quantity``. Pods carrying any label of ``airflow_pod_labels`` are Airflow's:
the pool accounts for them already. What pods hold on a node is at most its allocatable (the device
plugin can withdraw GPUs after pods were scheduled on them).

The client comes from the cncf-kubernetes provider's ``KubernetesHook`` (``kubernetes_conn_id``,
default ``kubernetes_default``: in-cluster or kubeconfig, as the KubernetesPodOperator connects), built
again when the API answers 401 or 403 (credentials rotated in the connection).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

from airflow_gpu_dag.watermark.capacity import CapacityReading, SourceError

__all__ = ["DEFAULT_AIRFLOW_POD_LABELS", "GPU_RESOURCE", "KubernetesSource", "pod_request"]

GPU_RESOURCE = "nvidia.com/gpu"
#: Labels that mark a pod as started by Airflow (KubernetesPodOperator, KubernetesExecutor).
DEFAULT_AIRFLOW_POD_LABELS = ("kubernetes_pod_operator", "airflow-worker", "airflow_kpo_in_cluster")


def _quantity(value: object) -> float:
    """A Kubernetes quantity (``"8"``, ``8``, ``"1k"``) as a number; None or garbage is 0."""
    if value is None:
        return 0.0
    # start-up: the controller imports every source; only a kubernetes one loads the client (~1,000 modules)
    from kubernetes.utils import parse_quantity

    try:
        number = float(parse_quantity(value))
    except (TypeError, ValueError, ArithmeticError):  # ArithmeticError: "1e400" overflows, a NaN Decimal
        return 0.0
    return number if math.isfinite(number) else 0.0  # "NaN", "Infinity": garbage too


def _container_request(container: Any, resource: str) -> float:
    resources = getattr(container, "resources", None)
    requests = (getattr(resources, "requests", None) or {}) if resources else {}
    limits = (getattr(resources, "limits", None) or {}) if resources else {}
    return _quantity(requests.get(resource, limits.get(resource)))


def pod_request(spec: Any, resource: str = GPU_RESOURCE) -> float:
    """What the scheduler reserves of ``resource`` for a pod with ``spec`` (see the module docstring)."""
    sidecars = 0.0
    init_peak = 0.0
    for container in getattr(spec, "init_containers", None) or ():
        amount = _container_request(container, resource)
        if getattr(container, "restart_policy", None) == "Always":  # a sidecar: runs alongside
            sidecars += amount
            init_peak = max(init_peak, sidecars)
        else:
            init_peak = max(init_peak, sidecars + amount)
    apps = sum(_container_request(c, resource) for c in getattr(spec, "containers", None) or ())
    return max(apps + sidecars, init_peak)


class KubernetesSource:
    """Allocatable GPUs on matching nodes minus what non-Airflow pods request there.

    :param kubernetes_conn_id: the Airflow connection of the cluster (``KubernetesHook``).
    :param context: kubeconfig context (the hook's ``cluster_context``); None: the connection's.
    :param api: a ``kubernetes.client.CoreV1Api`` (or a fake with ``list_node`` and
        ``list_pod_for_all_namespaces``); None: the hook's ``core_v1_client``.
    :param timeout: seconds the two API requests may take together (default 15, within the default
        30-s ``source_timeout``): the second gets what the first left. The kubernetes client applies it
        (``_request_timeout``) to connecting and to each socket read; a server that trickles its answer
        faster than that is cut off by the pool's ``source_timeout`` (the read counts as failed, and
        no other read of the source starts until that one returns).
    """

    kind = "kubernetes"

    def __init__(
        self,
        label_selector: str = "",
        airflow_pod_labels: Sequence[str] = DEFAULT_AIRFLOW_POD_LABELS,
        resource: str = GPU_RESOURCE,
        context: str | None = None,
        kubernetes_conn_id: str = "kubernetes_default",
        api: Any = None,
        timeout: float = 15.0,
    ) -> None:
        if isinstance(airflow_pod_labels, str):
            raise ValueError(f"airflow_pod_labels must be a list like [{airflow_pod_labels}], not a string")
        if isinstance(timeout, bool) or not (isinstance(timeout, int | float) and 0 < timeout < math.inf):
            raise ValueError(
                f"kubernetes timeout must be seconds > 0 (the API requests' limit), not {timeout!r}"
            )
        self.label_selector = label_selector
        self.airflow_pod_labels = tuple(airflow_pod_labels)
        self.resource = resource
        self.context = context
        self.kubernetes_conn_id = kubernetes_conn_id
        self._api = api
        #: the client comes from the hook (not given): built again after a 401/403 (rotated credentials)
        self._from_hook = api is None
        self.timeout = timeout

    def _client(self) -> Any:
        if self._api is None:
            # start-up: the Kubernetes client loads with the first kubernetes source (see _quantity)
            from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

            hook = KubernetesHook(conn_id=self.kubernetes_conn_id, cluster_context=self.context)
            self._api = hook.core_v1_client
        return self._api

    def _left(self, until: float) -> float:
        """Seconds left for the next API request (:class:`SourceError` when none are)."""
        left = until - time.monotonic()
        if left <= 0:
            raise SourceError(f"kubernetes API: no complete answer within {self.timeout:g}s")
        return left

    def read(self) -> CapacityReading:
        until = time.monotonic() + self.timeout
        try:
            api = self._client()
            nodes = api.list_node(
                label_selector=self.label_selector or None, _request_timeout=self._left(until)
            ).items
            pods = api.list_pod_for_all_namespaces(
                field_selector="status.phase!=Succeeded,status.phase!=Failed",
                _request_timeout=self._left(until),
            ).items
        except SourceError:
            raise
        except Exception as err:
            if self._from_hook and getattr(err, "status", None) in (401, 403):
                self._api = None  # expired or rotated credentials: the next read builds the client again
            raise SourceError(
                f"kubernetes API: {type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"
            ) from None
        allocatable: dict[str, int] = {}
        for node in nodes:
            name = node.metadata.name
            if node.spec is not None and node.spec.unschedulable:
                continue
            conditions = (node.status.conditions or []) if node.status else []
            if not any(c.type == "Ready" and c.status == "True" for c in conditions):
                continue
            allocatable[name] = int(
                _quantity(((node.status.allocatable or {}) if node.status else {}).get(self.resource))
            )
        foreign: dict[str, float] = {}
        for pod in pods:
            node_name = pod.spec.node_name if pod.spec else None
            if node_name not in allocatable:
                continue
            labels = pod.metadata.labels or {}
            if any(key in labels for key in self.airflow_pod_labels):
                continue
            foreign[node_name] = foreign.get(node_name, 0.0) + pod_request(pod.spec, self.resource)
        # Per node: pods can hold more than a node's allocatable now (the device plugin marked GPUs
        # unhealthy after they were scheduled); the excess holds nothing on the other nodes.
        held = sum(min(allocatable[name], math.ceil(amount)) for name, amount in foreign.items())
        total = sum(allocatable.values())
        usable = max(0, total - held)
        return CapacityReading(
            usable, f"kubernetes {usable} = {total} allocatable on {len(allocatable)} nodes - {held} held"
        )
