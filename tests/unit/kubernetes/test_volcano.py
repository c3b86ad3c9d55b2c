"""Tests of ``airflow_gpu_dag.kubernetes.volcano``."""

from __future__ import annotations

import copy
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
