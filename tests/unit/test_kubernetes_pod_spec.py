"""The GPU parts of a pod (airflow_gpu_dag.kubernetes), Volcano PodGroups and Kueue metadata."""

from __future__ import annotations

import copy
from unittest import mock

import pytest
from kubernetes.client import ApiClient
from kubernetes.client import models as k8s
from kubernetes.client.exceptions import ApiException

from airflow_gpu_dag.kubernetes import volcano
from airflow_gpu_dag.kubernetes.kueue import (
    POD_GROUP_LABEL,
    POD_GROUP_TOTAL_COUNT_ANNOTATION,
    QUEUE_LABEL,
    KueueError,
    kueue_pod_metadata,
)
from airflow_gpu_dag.kubernetes.pod_spec import (
    GPU_PRODUCT_LABEL,
    GPU_RESOURCE,
    GpuPodSpec,
    GpuPodSpecError,
    dataset_label,
    merge_affinity,
    merge_resources,
    merge_tolerations,
)

SER = ApiClient().sanitize_for_serialization


class TestGpuPodSpec:
    def test_type_maps_to_product_values_and_memory_to_gfd_label(self):
        spec = GpuPodSpec.parse(4, "80GiB", "A100")
        assert spec.gpu_type == "a100" and spec.memory_mib == 81920
        reqs = SER(spec.required_node_requirements())
        assert reqs[0]["key"] == GPU_PRODUCT_LABEL and reqs[0]["operator"] == "In"
        assert "NVIDIA-A100-SXM4-80GB" in reqs[0]["values"]
        assert reqs[1] == {"key": "nvidia.com/gpu.memory", "operator": "Gt", "values": ["81919"]}

    def test_override_mapping_and_unknown_type(self):
        spec = GpuPodSpec.parse(1, gpu_type="mi300", gpu_products={"mi300": ["AMD-Instinct-MI300X"]})
        assert spec.products == ("AMD-Instinct-MI300X",)
        with pytest.raises(GpuPodSpecError, match=r"unknown gpu_type 'b300'.*gpu_products="):
            GpuPodSpec.parse(1, gpu_type="b300")

    @pytest.mark.parametrize(
        ("gpus", "memory", "match"),
        [
            (0, None, "at least 1"),
            (-2, None, "at least 1"),
            (None, None, "gpus is required"),
            (1.5, None, "whole number"),
            (2, "lots", "cannot be parsed"),
        ],
    )
    def test_bad_input(self, gpus, memory, match):
        with pytest.raises(GpuPodSpecError, match=match):
            GpuPodSpec.parse(gpus, memory)

    def test_data_affinity_prefer_and_require(self):
        prefer = GpuPodSpec.parse(1, datasets=["c4-en", "wiki"])
        assert [t["preference"]["matchExpressions"][0]["key"] for t in SER(prefer.preferred_terms())] == [
            "gpu-dag.io/dataset-c4-en",
            "gpu-dag.io/dataset-wiki",
        ]
        assert prefer.required_node_requirements() == []
        require = GpuPodSpec.parse(1, datasets="c4-en", data_affinity="require")
        assert require.preferred_terms() == []
        assert SER(require.required_node_requirements()) == [
            {"key": "gpu-dag.io/dataset-c4-en", "operator": "Exists"}
        ]
        with pytest.raises(GpuPodSpecError, match=r"'prefer'.*'require'"):
            GpuPodSpec.parse(1, datasets="x", data_affinity="must")

    @pytest.mark.parametrize("name", ["", "has space", "trail-", "x" * 60, "a/b"])
    def test_dataset_names_must_fit_a_label(self, name):
        with pytest.raises(GpuPodSpecError, match="node label"):
            dataset_label(name)


class TestMerging:
    def test_resources_keep_user_values_and_reject_conflicts(self):
        merged = merge_resources(
            k8s.V1ResourceRequirements(requests={"cpu": "4"}, limits={"memory": "1Gi"}), 2
        )
        assert merged.requests == {"cpu": "4", GPU_RESOURCE: "2"}
        assert merged.limits == {"memory": "1Gi", GPU_RESOURCE: "2"}
        assert merge_resources({"limits": {GPU_RESOURCE: 2}}, 2).limits[GPU_RESOURCE] == "2"
        with pytest.raises(GpuPodSpecError, match="only through gpus="):
            merge_resources({"limits": {GPU_RESOURCE: "8"}}, 2)

    def test_required_terms_are_anded_into_every_user_term(self):
        user = k8s.V1Affinity(
            node_affinity=k8s.V1NodeAffinity(
                required_during_scheduling_ignored_during_execution=k8s.V1NodeSelector(
                    node_selector_terms=[
                        k8s.V1NodeSelectorTerm(
                            match_expressions=[
                                k8s.V1NodeSelectorRequirement(key="zone", operator="In", values=["a"])
                            ]
                        ),
                        k8s.V1NodeSelectorTerm(
                            match_expressions=[
                                k8s.V1NodeSelectorRequirement(key="zone", operator="In", values=["b"])
                            ]
                        ),
                    ]
                )
            ),
            pod_anti_affinity=k8s.V1PodAntiAffinity(),
        )
        spec = GpuPodSpec.parse(1, gpu_type="h100")
        merged = SER(merge_affinity(user, spec.required_node_requirements(), spec.preferred_terms()))
        terms = merged["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert len(terms) == 2
        for term in terms:
            assert [e["key"] for e in term["matchExpressions"]] == ["zone", GPU_PRODUCT_LABEL]
        assert "podAntiAffinity" in merged

    def test_nothing_to_add_keeps_none(self):
        assert merge_affinity(None, [], []) is None

    def test_toleration_added_once(self):
        once = merge_tolerations(None)
        assert SER(once) == [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}]
        assert len(merge_tolerations(once)) == 1


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


class TestKueue:
    def test_queue_label_and_pod_group(self):
        labels, annotations = kueue_pod_metadata("team-a", pod_group="g1", pod_group_size=3)
        assert labels == {QUEUE_LABEL: "team-a", POD_GROUP_LABEL: "g1"}
        assert annotations == {POD_GROUP_TOTAL_COUNT_ANNOTATION: "3"}

    @pytest.mark.parametrize(
        ("queue", "kwargs"),
        [
            ("", {}),
            ("bad queue", {}),
            ("q", {"pod_group": "g"}),
            ("q", {"pod_group": "g", "pod_group_size": 0}),
        ],
    )
    def test_bad_input(self, queue, kwargs):
        with pytest.raises(KueueError):
            kueue_pod_metadata(queue, **kwargs)
