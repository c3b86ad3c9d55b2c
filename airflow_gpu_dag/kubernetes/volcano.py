"""Volcano batch scheduling: ``schedulerName: volcano``, PodGroups (gang ``minMember``) and queues.

A pod is handed to Volcano by ``spec.schedulerName: volcano``. Volcano schedules *PodGroups*: all
pods annotated with ``scheduling.k8s.io/group-name: <group>`` start together once ``minMember`` of
them (and ``minResources``) fit — all-or-nothing, so a distributed training job never holds half
its GPUs while waiting for the rest. A pod without the annotation gets a one-pod group created by
Volcano's controller (its queue from the annotation ``scheduling.volcano.sh/queue-name``).

For a multi-pod job (several Airflow tasks that must start together, e.g. the workers of one
training run) the tasks share a *gang* key; every task of the gang ensures the same PodGroup exists
(created on first use, 409 AlreadyExists is fine) and annotates its pod with it. The manifest is a
pure dict (:func:`podgroup_manifest`), checked against the PodGroup CRD's ``openAPIV3Schema``
shipped in ``schemas/volcano_podgroup_v1beta1.schema.json`` (copied from volcano-sh/volcano, Apache
License 2.0) before it is sent through the cncf-kubernetes hook's custom objects API.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from functools import cache
from importlib import resources
from typing import Any

import jsonschema
from kubernetes.client.exceptions import ApiException

__all__ = [
    "GROUP_NAME_ANNOTATION",
    "OBJECT_NAME",
    "PODGROUP_GROUP",
    "PODGROUP_PLURAL",
    "PODGROUP_VERSION",
    "QUEUE_ANNOTATION",
    "VOLCANO_SCHEDULER",
    "PodGroupError",
    "ensure_podgroup",
    "gang_podgroup_name",
    "podgroup_manifest",
    "podgroup_schema",
    "validate_podgroup",
]

#: ``spec.schedulerName`` that hands a pod to Volcano.
VOLCANO_SCHEDULER = "volcano"
#: Pod annotation naming the PodGroup a pod belongs to.
GROUP_NAME_ANNOTATION = "scheduling.k8s.io/group-name"
#: Pod annotation naming the Volcano queue (used when Volcano creates a one-pod group itself).
QUEUE_ANNOTATION = "scheduling.volcano.sh/queue-name"
PODGROUP_GROUP = "scheduling.volcano.sh"
PODGROUP_VERSION = "v1beta1"
PODGROUP_PLURAL = "podgroups"
PODGROUP_KIND = "PodGroup"

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
#: A Kubernetes object name (DNS-1123 subdomain, at most 253 characters): any PodGroup's name (``\Z``:
#: a name ending in a newline is refused, as the API server refuses it).
OBJECT_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
_SCHEMA_FILE = "volcano_podgroup_v1beta1.schema.json"


class PodGroupError(ValueError):
    """A PodGroup that cannot be valid (bad name, minMember, resources)."""


def gang_podgroup_name(dag_id: str, run_id: str, gang: str) -> str:
    """A DNS-1123 PodGroup name unique to one DAG run and gang key (at most 63 characters).

    ``run_id`` contains ``:`` and ``+``, so the name is a readable prefix plus a short hash of the
    exact (dag_id, run_id, gang) triple: the same triple always gives the same name.
    """
    digest = hashlib.sha256(f"{dag_id}\x00{run_id}\x00{gang}".encode()).hexdigest()[:10]
    readable = re.sub(r"[^a-z0-9-]+", "-", f"{dag_id}-{gang}".lower()).strip("-")[:48].strip("-")
    return f"{readable or 'gang'}-{digest}"


def podgroup_manifest(
    name: str,
    *,
    namespace: str | None = None,
    min_member: int = 1,
    queue: str | None = None,
    priority_class_name: str | None = None,
    min_resources: Mapping[str, str | int] | None = None,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The PodGroup ``scheduling.volcano.sh/v1beta1`` manifest as a plain dict.

    :param min_member: pods that must fit together before any starts (the gang size).
    :param queue: Volcano queue; None = Volcano's ``default`` queue.
    :param min_resources: resources the whole gang needs, e.g. ``{"nvidia.com/gpu": "16"}``.
    """
    if not isinstance(name, str) or len(name) > 63 or not _DNS_LABEL.match(name):
        raise PodGroupError(
            f"PodGroup name {name!r} must be a DNS-1123 label (lower-case letters, digits, '-', at most "
            "63 characters); use gang_podgroup_name() to derive one"
        )
    if isinstance(min_member, bool) or not isinstance(min_member, int) or min_member < 1:
        raise PodGroupError(f"minMember {min_member!r} must be an int >= 1 (the number of pods in the gang)")
    metadata: dict[str, Any] = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    if labels:
        metadata["labels"] = dict(labels)
    spec: dict[str, Any] = {"minMember": min_member}
    if queue:
        spec["queue"] = queue
    if priority_class_name:
        spec["priorityClassName"] = priority_class_name
    if min_resources:
        spec["minResources"] = {str(k): str(v) for k, v in min_resources.items()}
    return {
        "apiVersion": f"{PODGROUP_GROUP}/{PODGROUP_VERSION}",
        "kind": PODGROUP_KIND,
        "metadata": metadata,
        "spec": spec,
    }


@cache
def podgroup_schema() -> dict[str, Any]:
    """The PodGroup CRD's ``openAPIV3Schema`` (from volcano-sh/volcano; see its ``$comment``)."""
    text = resources.files("airflow_gpu_dag.kubernetes.schemas").joinpath(_SCHEMA_FILE).read_text()
    schema: dict[str, Any] = json.loads(text)
    return schema


def _strict(schema: Any) -> Any:
    """Copy of an OpenAPI v3 schema where objects with ``properties`` reject unknown keys.

    The API server would silently prune an unknown field (a typo such as ``minMembers``); for
    validation we want it reported instead.
    """
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if "properties" in out and "additionalProperties" not in out:
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


def validate_podgroup(manifest: Mapping[str, Any], *, strict: bool = True) -> None:
    """Validate a PodGroup manifest against the CRD schema; raises :class:`PodGroupError`.

    ``strict`` also rejects fields the CRD does not define (the API server would drop them).
    """
    schema = podgroup_schema()
    if strict:
        schema = _strict(schema)
    errors = sorted(
        jsonschema.Draft202012Validator(schema).iter_errors(dict(manifest)), key=lambda e: list(e.path)
    )
    if (
        manifest.get("apiVersion") != f"{PODGROUP_GROUP}/{PODGROUP_VERSION}"
        or manifest.get("kind") != "PodGroup"
    ):
        raise PodGroupError(f"not a {PODGROUP_GROUP}/{PODGROUP_VERSION} PodGroup: {manifest.get('kind')!r}")
    if errors:
        detail = "; ".join(f"{'.'.join(str(p) for p in e.path) or '<root>'}: {e.message}" for e in errors)
        metadata = manifest.get("metadata")
        name = metadata.get("name") if isinstance(metadata, Mapping) else None
        raise PodGroupError(f"PodGroup {name!r} is invalid: {detail}")


def ensure_podgroup(hook: Any, manifest: Mapping[str, Any], namespace: str) -> bool:
    """Create the PodGroup through ``hook`` (a cncf-kubernetes ``KubernetesHook``) unless it exists.

    Returns True when this call created it, False when it already existed (another task of the same
    gang was first). Any other API error propagates.
    """
    validate_podgroup(manifest)
    try:
        hook.create_custom_object(
            group=PODGROUP_GROUP,
            version=PODGROUP_VERSION,
            plural=PODGROUP_PLURAL,
            body=dict(manifest),
            namespace=namespace,
        )
    except ApiException as err:
        if err.status == 409:
            return False
        raise
    return True
