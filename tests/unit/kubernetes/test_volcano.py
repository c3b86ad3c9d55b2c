"""Tests of ``airflow_gpu_dag.kubernetes.volcano``."""

from __future__ import annotations

import copy
import re
from types import MappingProxyType
from unittest import mock

import pytest
from kubernetes.client import models as k8s
from kubernetes.client.exceptions import ApiException

from airflow_gpu_dag.kubernetes import volcano
from airflow_gpu_dag.kubernetes.pod_spec import GPU_RESOURCE
from airflow_gpu_dag.kubernetes.volcano import validate_podgroup
from airflow_gpu_dag.operators.kubernetes import GpuKubernetesPodOperator
from tests.unit.operators.conftest import (
    _build,
    _context,
    _dag,
)


def test_gang_pods_share_a_schema_valid_podgroup_created_through_the_hook():
    with _dag("gang") as dag:
        ops = [
            GpuKubernetesPodOperator(
                task_id=f"worker_{i}",
                image="img",
                namespace="ml",
                gpus=8,
                gpu_type="h100",
                volcano=True,
                volcano_queue="training",
                volcano_gang="ddp",
                volcano_gang_size=2,
                critical_priority_class="gpu-critical",
                durable=False,
                log_events_on_startup=False,
            )
            for i in range(2)
        ]
    pods = [_build(op, dag) for op in ops]
    groups = {p["metadata"]["annotations"]["scheduling.k8s.io/group-name"] for p in pods}
    assert len(groups) == 1
    manifest = ops[0].podgroup_manifest(_context(dag, "worker_0"), "ml")
    validate_podgroup(manifest)
    assert manifest["metadata"]["name"] == groups.pop()
    assert manifest["spec"] == {
        "minMember": 2,
        "queue": "training",
        "priorityClassName": "gpu-critical",
        "minResources": {"nvidia.com/gpu": "16"},
    }

    hook = mock.Mock()
    ops[0].__dict__["hook"] = hook
    pod_manager = mock.Mock()
    ops[0].__dict__["pod_manager"] = pod_manager
    request = k8s.V1Pod(metadata=k8s.V1ObjectMeta(name="p", namespace="ml"))
    ops[0].get_or_create_pod(request, _context(dag, "worker_0"))
    hook.create_custom_object.assert_called_once()
    assert hook.create_custom_object.call_args.kwargs["body"] == manifest
    assert hook.create_custom_object.call_args.kwargs["plural"] == "podgroups"
    pod_manager.create_pod.assert_called_once_with(pod=request)


class TestVolcanoPodGroup:
    def test_manifest_validates_against_the_crd_schema(self):
        manifest = volcano.podgroup_manifest(
            "train-gang",
            namespace="ml",
            min_member=4,
            queue="training",
            priority_class_name="gpu-critical",
            min_resources={GPU_RESOURCE: 32, "cpu": "64"},
        )
        volcano.validate_podgroup(manifest)
        assert manifest["spec"] == {
            "minMember": 4,
            "queue": "training",
            "priorityClassName": "gpu-critical",
            "minResources": {GPU_RESOURCE: "32", "cpu": "64"},
        }

    def test_schema_is_the_stored_crd_and_catches_bad_manifests(self):
        schema = volcano.podgroup_schema()
        assert "volcano-sh/volcano" in schema["$comment"] and "Apache" in schema["$comment"]
        good = volcano.podgroup_manifest("g", min_member=1, queue="q")
        bad_type = copy.deepcopy(good)
        bad_type["spec"]["minMember"] = "four"
        with pytest.raises(volcano.PodGroupError, match="minMember"):
            volcano.validate_podgroup(bad_type)
        typo = copy.deepcopy(good)
        typo["spec"]["minMembers"] = 2
        with pytest.raises(volcano.PodGroupError, match="minMembers"):
            volcano.validate_podgroup(typo)
        volcano.validate_podgroup(typo, strict=False)  # the API server would prune it
        bad_qty = copy.deepcopy(good)
        bad_qty["spec"]["minResources"] = {GPU_RESOURCE: "eight"}
        with pytest.raises(volcano.PodGroupError, match="minResources"):
            volcano.validate_podgroup(bad_qty)

    @pytest.mark.parametrize(
        ("name", "min_member"), [("Bad_Name", 1), ("x" * 64, 1), ("ok", 0), ("ok", True)]
    )
    def test_bad_manifest_input(self, name, min_member):
        with pytest.raises(volcano.PodGroupError):
            volcano.podgroup_manifest(name, min_member=min_member)

    def test_gang_name_is_stable_dns_and_unique_per_run(self):
        a = volcano.gang_podgroup_name("My_DAG", "manual__2026-11-30T00:00:00+00:00", "workers")
        b = volcano.gang_podgroup_name("My_DAG", "manual__2026-11-30T00:00:00+00:00", "workers")
        c = volcano.gang_podgroup_name("My_DAG", "manual__2026-12-01T00:00:00+00:00", "workers")
        assert a == b != c
        assert len(a) <= 63 and volcano._DNS_LABEL.match(a)
        long = volcano.gang_podgroup_name("d" * 200, "r", "g" * 200)
        assert len(long) <= 63 and volcano._DNS_LABEL.match(long)

    def test_ensure_podgroup_uses_custom_objects_api_and_tolerates_409(self):
        hook = mock.Mock()
        manifest = volcano.podgroup_manifest("g", min_member=2, queue="q")
        assert volcano.ensure_podgroup(hook, manifest, "ml") is True
        hook.create_custom_object.assert_called_once_with(
            group="scheduling.volcano.sh",
            version="v1beta1",
            plural="podgroups",
            body=manifest,
            namespace="ml",
        )
        hook.create_custom_object.side_effect = ApiException(status=409, reason="AlreadyExists")
        assert volcano.ensure_podgroup(hook, manifest, "ml") is False
        hook.create_custom_object.side_effect = ApiException(status=403, reason="Forbidden")
        with pytest.raises(ApiException):
            volcano.ensure_podgroup(hook, manifest, "ml")


# -- names ----------------------------------------------------------------------------------------------

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")  # Kubernetes' IsDNS1123Label, without its '$' hole


def test_volcano_constants_are_the_names_volcano_reads():
    assert volcano.VOLCANO_SCHEDULER == "volcano"
    assert volcano.GROUP_NAME_ANNOTATION == "scheduling.k8s.io/group-name"
    assert volcano.QUEUE_ANNOTATION == "scheduling.volcano.sh/queue-name"
    assert (volcano.PODGROUP_GROUP, volcano.PODGROUP_VERSION, volcano.PODGROUP_PLURAL) == (
        "scheduling.volcano.sh",
        "v1beta1",
        "podgroups",
    )


def test_a_gang_name_is_the_readable_dag_and_gang_plus_a_hash_stable_across_processes():
    """Every worker of a gang runs in its own process: the name must not depend on Python's salted hash()."""
    name = volcano.gang_podgroup_name("llm_pipeline", "manual__2026-11-30T00:00:00+00:00", "ddp")
    assert name == "llm-pipeline-ddp-1051ba2997"


def test_a_gang_name_differs_per_gang_key_and_per_dag():
    run = "scheduled__2026-11-30T00:00:00+00:00"
    names = {
        volcano.gang_podgroup_name("etl", run, "ddp"),
        volcano.gang_podgroup_name("etl", run, "eval"),
        volcano.gang_podgroup_name("ETL", run, "ddp"),  # same readable prefix, another DAG
    }
    assert len(names) == 3


@pytest.mark.parametrize(
    ("dag_id", "gang", "prefix"),
    [("___", "!!!", "gang-"), ("Ünïcode DAG", "w", "n-code-dag-w-"), ("d" * 47, "-x", "d" * 47 + "-")],
)
def test_a_gang_name_is_a_dns_label_even_from_names_with_nothing_readable(dag_id, gang, prefix):
    name = volcano.gang_podgroup_name(dag_id, "r", gang)
    assert name.startswith(prefix) and re.fullmatch(r"[0-9a-f]{10}", name[len(prefix) :])
    assert len(name) <= 63 and _DNS_LABEL.fullmatch(name)
    volcano.podgroup_manifest(name)  # accepted as a PodGroup name


@pytest.mark.parametrize("name", ["nightly-eval", "nightly-eval.v2", "a" * 253])
def test_object_name_accepts_dns_subdomains(name):
    assert volcano.OBJECT_NAME.match(name)


@pytest.mark.parametrize(
    "name",
    [
        "Nightly",
        "a..b",
        "-a",
        "a_b",
        "nightly-eval\n",
    ],
)
def test_object_name_refuses_what_kubernetes_refuses(name):
    assert volcano.OBJECT_NAME.match(name) is None


# -- podgroup_manifest ----------------------------------------------------------------------------------


def test_a_minimal_podgroup_is_one_member_in_volcanos_default_queue():
    """queue=None and no priority: the keys are left out, so Volcano's defaults (queue 'default') apply."""
    manifest = volcano.podgroup_manifest("g", queue=None, priority_class_name=None, min_resources={})
    assert manifest == {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "g"},
        "spec": {"minMember": 1},
    }
    volcano.validate_podgroup(manifest)


def test_namespace_and_labels_go_into_the_podgroups_metadata():
    labels = {"app.kubernetes.io/managed-by": "airflow-gpu-dag"}
    manifest = volcano.podgroup_manifest("g" * 63, namespace="ml", labels=labels)
    assert manifest["metadata"] == {"name": "g" * 63, "namespace": "ml", "labels": labels}
    assert manifest["metadata"]["labels"] is not labels  # a copy: the caller's dict is not shared
    volcano.validate_podgroup(manifest)


def test_a_bad_podgroup_name_says_to_derive_one():
    with pytest.raises(volcano.PodGroupError, match=r"must be a DNS-1123 label.*use gang_podgroup_name\(\)"):
        volcano.podgroup_manifest("nightly.eval")


@pytest.mark.parametrize("min_member", [-1, 2.0, "2", None])
def test_min_member_must_be_a_positive_int(min_member):
    with pytest.raises(volcano.PodGroupError, match=r"minMember .* must be an int >= 1 \(the number of pods"):
        volcano.podgroup_manifest("g", min_member=min_member)


def test_a_podgroup_name_with_a_trailing_newline_is_refused():
    """'g\\n' is no DNS-1123 label: the API server would refuse the PodGroup, so it must fail here."""
    with pytest.raises(volcano.PodGroupError):
        volcano.podgroup_manifest("g\n")


# -- validate_podgroup ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"), [("kind", "Pod"), ("apiVersion", "scheduling.volcano.sh/v1alpha1")]
)
def test_a_manifest_that_is_not_a_v1beta1_podgroup_is_refused(field, value):
    manifest = {**volcano.podgroup_manifest("g"), field: value}
    with pytest.raises(volcano.PodGroupError, match=r"not a scheduling\.volcano\.sh/v1beta1 PodGroup"):
        volcano.validate_podgroup(manifest)


def test_every_schema_error_is_reported_with_its_path():
    manifest = volcano.podgroup_manifest("train", queue="q")
    manifest["spec"].update(queue="Training_Q", minMember=-1)
    manifest["extra"] = True
    with pytest.raises(volcano.PodGroupError) as err:
        volcano.validate_podgroup(manifest)
    message = str(err.value)
    assert message.startswith("PodGroup 'train' is invalid: <root>: Additional properties are not allowed")
    assert "; spec.minMember: -1 is less than the minimum of 0" in message
    assert "; spec.queue: 'Training_Q' does not match" in message


def test_not_strict_validation_still_refuses_wrong_types():
    manifest = volcano.podgroup_manifest("g")
    manifest["spec"]["minMember"] = "4"
    with pytest.raises(volcano.PodGroupError, match=r"spec\.minMember: '4' is not of type 'integer'"):
        volcano.validate_podgroup(manifest, strict=False)


def test_a_manifest_whose_metadata_is_not_an_object_raises_podgroup_error():
    """validate_podgroup's documented error is PodGroupError, also for the manifests it exists to catch."""
    manifest = {**volcano.podgroup_manifest("g"), "metadata": None}
    with pytest.raises(volcano.PodGroupError, match=r"metadata: None is not of type 'object'"):
        volcano.validate_podgroup(manifest)


# -- ensure_podgroup ------------------------------------------------------------------------------------


def test_an_invalid_podgroup_is_never_sent_to_the_api_server():
    hook = mock.Mock()
    manifest = volcano.podgroup_manifest("g", min_resources={GPU_RESOURCE: "eight"})
    with pytest.raises(volcano.PodGroupError, match="minResources"):
        volcano.ensure_podgroup(hook, manifest, "ml")
    hook.create_custom_object.assert_not_called()


def test_a_read_only_manifest_is_sent_as_a_plain_dict():
    hook = mock.Mock()
    manifest = MappingProxyType(volcano.podgroup_manifest("g", min_member=2))
    assert volcano.ensure_podgroup(hook, manifest, "ml") is True
    body = hook.create_custom_object.call_args.kwargs["body"]
    assert type(body) is dict and body == dict(manifest)
