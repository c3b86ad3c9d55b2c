"""The GPU parts of a pod (airflow_gpu_dag.kubernetes), Volcano PodGroups and Kueue metadata."""

from __future__ import annotations

from types import SimpleNamespace

import kubernetes_validate
import pytest
from kubernetes.client import models as k8s

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
from airflow_gpu_dag.operators.kubernetes import GpuKubernetesPodOperator
from tests.unit.operators.conftest import RUN_ID, SER, build_pod, pod_dag


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


def test_dict_container_resources_keep_their_resource_claims() -> None:
    # container_resources given as a dict keeps its "claims" (a DRA claim of the container, e.g. a
    # GPU ResourceClaim), as the V1ResourceRequirements form does.
    given = {"limits": {"cpu": "4"}, "claims": [{"name": "gpu-claim"}]}
    merged = SER(merge_resources(given, 2))
    assert merged["claims"] == [{"name": "gpu-claim"}]
    assert merged["limits"] == {"cpu": "4", "nvidia.com/gpu": "2"}
    with pod_dag() as dag:
        op = GpuKubernetesPodOperator(task_id="claims", image="i", gpus=2, container_resources=given)
    ti = SimpleNamespace(dag_id=dag.dag_id, task_id="claims", map_index=-1, try_number=1)
    pod = SER(build_pod(op, {"ti": ti, "run_id": RUN_ID, "dag": dag}))
    resources = pod["spec"]["containers"][0]["resources"]
    assert resources["claims"] == [{"name": "gpu-claim"}]
    assert kubernetes_validate.validate(pod, "1.37.0", strict=True) == "1.37"
