"""The GPU parts of a pod (airflow_gpu_dag.kubernetes), Volcano PodGroups and Kueue metadata."""

from __future__ import annotations

import dataclasses
import re
from types import SimpleNamespace

import kubernetes_validate
import pytest
from kubernetes.client import models as k8s

from airflow_gpu_dag.kubernetes.pod_spec import (
    DATASET_LABEL_PREFIX,
    DEFAULT_GPU_PRODUCTS,
    GPU_MEMORY_LABEL,
    GPU_PRODUCT_LABEL,
    GPU_RESOURCE,
    GpuPodSpec,
    GpuPodSpecError,
    dataset_label,
    gpu_toleration,
    merge_affinity,
    merge_resources,
    merge_tolerations,
)
from airflow_gpu_dag.operators.kubernetes import GpuKubernetesPodOperator
from tests.unit.operators.conftest import RUN_ID, SER, _validate, build_pod, pod_dag


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


# -- GpuPodSpec.parse: GPU type, memory, datasets ---------------------------------------------------------

#: Kubernetes' rule for the name part of a label key and for a label value (``IsQualifiedName``,
#: ``IsValidLabelValue``): the OpenAPI schema ``kubernetes_validate`` checks does not look at them.
_K8S_LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_K8S_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _is_label_key(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    prefix_ok = not prefix or (len(prefix) <= 253 and _K8S_DNS_SUBDOMAIN.fullmatch(prefix) is not None)
    return prefix_ok and len(name) <= 63 and _K8S_LABEL_NAME.fullmatch(name) is not None


def test_gpu_type_a100_requires_exactly_the_four_a100_products_of_the_docs():
    """docs/kubernetes.md lists the product values of "a100"; a GPU count given as a string is read as int."""
    spec = GpuPodSpec.parse("4", gpu_type=" A100 ")
    assert (spec.gpus, spec.gpu_type, spec.memory_mib) == (4, "a100", None)
    assert SER(spec.required_node_requirements()) == [
        {
            "key": "nvidia.com/gpu.product",
            "operator": "In",
            "values": [
                "NVIDIA-A100-SXM4-80GB",
                "NVIDIA-A100-SXM4-40GB",
                "NVIDIA-A100-80GB-PCIe",
                "NVIDIA-A100-PCIE-40GB",
            ],
        }
    ]


def test_every_built_in_gpu_type_is_a_normalized_name_with_valid_product_label_values():
    """A built-in product string that is not a label value could never match a node."""
    assert sorted(DEFAULT_GPU_PRODUCTS) == ["a100", "a10g", "h100", "h200", "l4", "l40s", "t4", "v100"]
    for gpu_type, products in DEFAULT_GPU_PRODUCTS.items():
        assert GpuPodSpec.parse(1, gpu_type=gpu_type).products == products
        assert products and all(len(p) <= 63 and _K8S_LABEL_NAME.fullmatch(p) for p in products)


@pytest.mark.parametrize(
    ("gpu_memory", "mib"),
    [("80GiB", 81920), ("80G", 76294), (40960, 40960)],
    ids=["binary", "decimal-accepts-every-80GB-card", "int-is-mib"],
)
def test_gpu_memory_becomes_a_required_gpu_memory_label_of_at_least_that_many_mib(gpu_memory, mib):
    spec = GpuPodSpec.parse(2, gpu_memory)
    assert spec.memory_mib == mib
    assert SER(spec.required_node_requirements()) == [
        {"key": GPU_MEMORY_LABEL, "operator": "Gt", "values": [str(mib - 1)]}
    ]


def test_gpu_memory_affinity_off_keeps_the_memory_but_drops_its_node_requirement():
    spec = GpuPodSpec.parse(2, "80GiB", "h100", gpu_memory_affinity=False)
    assert spec.memory_mib == 81920
    assert [r.key for r in spec.required_node_requirements()] == [GPU_PRODUCT_LABEL]


def test_required_requirements_are_product_then_memory_then_each_required_dataset():
    spec = GpuPodSpec.parse(8, "80GiB", "h100", datasets=["c4-en", "wiki"], data_affinity="require")
    assert SER(spec.required_node_requirements()) == [
        {"key": GPU_PRODUCT_LABEL, "operator": "In", "values": list(DEFAULT_GPU_PRODUCTS["h100"])},
        {"key": GPU_MEMORY_LABEL, "operator": "Gt", "values": ["81919"]},
        {"key": "gpu-dag.io/dataset-c4-en", "operator": "Exists"},
        {"key": "gpu-dag.io/dataset-wiki", "operator": "Exists"},
    ]


def test_preferred_data_affinity_is_one_weight_100_term_per_distinct_dataset_in_order():
    spec = GpuPodSpec.parse(1, datasets=("wiki", "c4", "wiki"))
    assert spec.datasets == ("wiki", "c4") and spec.data_affinity == "prefer"
    assert SER(spec.preferred_terms()) == [
        {
            "weight": 100,
            "preference": {"matchExpressions": [{"key": f"{DATASET_LABEL_PREFIX}{d}", "operator": "Exists"}]},
        }
        for d in ("wiki", "c4")
    ]


def test_no_datasets_means_no_data_affinity_in_either_mode():
    for mode in ("prefer", "require"):
        spec = GpuPodSpec.parse(1, datasets=None, data_affinity=mode)
        assert (
            spec.datasets == () and spec.preferred_terms() == [] and spec.required_node_requirements() == []
        )


def test_an_own_gpu_products_mapping_is_matched_on_the_normalized_type_name():
    spec = GpuPodSpec.parse(1, gpu_type="RTX-4090", gpu_products={"RTX 4090": ["NVIDIA-GeForce-RTX-4090"]})
    assert (spec.gpu_type, spec.products) == ("rtx_4090", ("NVIDIA-GeForce-RTX-4090",))


def test_merging_the_defaults_into_gpu_products_keeps_the_built_in_types():
    """docs/kubernetes.md: gpu_products={**DEFAULT_GPU_PRODUCTS, "b200": [...]} keeps a100 and adds b200."""
    mapping = {**DEFAULT_GPU_PRODUCTS, "b200": ["NVIDIA-B200"]}
    assert GpuPodSpec.parse(8, gpu_type="a100", gpu_products=mapping).products == DEFAULT_GPU_PRODUCTS["a100"]
    assert GpuPodSpec.parse(8, gpu_type="b200", gpu_products=mapping).products == ("NVIDIA-B200",)


def test_an_unknown_gpu_type_lists_the_known_types_and_how_to_add_it():
    with pytest.raises(GpuPodSpecError) as err:
        GpuPodSpec.parse(1, gpu_type="b300")
    assert str(err.value) == (
        "unknown gpu_type 'b300'; known types: a100, a10g, h100, h200, l4, l40s, t4, v100. "
        "Pass gpu_products={'b300': ['<value of nvidia.com/gpu.product on your nodes>']} to add it"
    )


def test_a_built_in_type_dropped_by_an_own_gpu_products_says_the_mapping_replaces_the_defaults():
    """docs/kubernetes.md: gpu_products={"b200": [...]} with gpu_type="a100" is an error naming the fix."""
    with pytest.raises(GpuPodSpecError) as err:
        GpuPodSpec.parse(1, gpu_type="a100", gpu_products={"b200": ["NVIDIA-B200"]})
    assert str(err.value) == (
        "unknown gpu_type 'a100'; known types: b200. gpu_products replaces the built-in types: keep them "
        "with gpu_products={**DEFAULT_GPU_PRODUCTS, ...}"
    )


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"gpus": True}, "whole number"),
        ({"gpu_memory": "40000"}, r"GPU memory '40000' has no unit"),
        ({"gpu_type": 100}, r"gpu_type 100 must be a GPU type name such as 'a100', or None"),
        ({"gpu_type": "  "}, r"gpu_type '  ' must be a GPU type name"),
        ({"gpu_type": "--"}, r"GPU type '--' has no letters or digits"),
        ({"gpu_type": "ä100"}, r"not ASCII.*write 'a100'"),
        ({"gpu_products": {"--": ["X"]}}, r"^gpu_products: GPU type '--' has no letters or digits"),
        (
            {"gpu_type": "b200", "gpu_products": {"b200": []}},
            r"gpu_products\['b200'\] = \[\] must be a non-empty list of nvidia\.com/gpu\.product label",
        ),
        ({"datasets": ["c4", "bad name"]}, r"dataset name 'bad name' cannot be part of the node label"),
        ({"data_affinity": "must"}, r"data_affinity 'must' must be 'prefer'"),  # checked without datasets
    ],
    ids=[
        "bool-gpus",
        "memory-without-unit",
        "non-str-type",
        "blank-type",
        "type-without-letters",
        "non-ascii-type",
        "bad-mapping-key",
        "empty-products",
        "bad-dataset",
        "bad-mode",
    ],
)
def test_bad_gpu_pod_arguments_raise_gpu_pod_spec_error_naming_the_fix(kwargs, match):
    kwargs = {"gpus": 1, **kwargs}
    with pytest.raises(GpuPodSpecError, match=match):
        GpuPodSpec.parse(**kwargs)


@pytest.mark.parametrize(
    "products",
    [
        pytest.param(["NVIDIA B200"], id="space"),
        pytest.param(["-NVIDIA-B200"], id="leading-dash"),
        pytest.param(["NVIDIA-B200\n"], id="trailing-newline"),
        pytest.param(["N" * 64], id="over-63-characters"),
    ],
)
def test_gpu_products_values_that_no_node_label_can_hold_are_refused(products):
    """Kubernetes label values are at most 63 characters of [A-Za-z0-9-_.]; any other never matches a node."""
    with pytest.raises(GpuPodSpecError, match=r"must be a non-empty list of nvidia\.com/gpu\.product label"):
        GpuPodSpec.parse(1, gpu_type="b200", gpu_products={"b200": products})


def test_a_single_product_given_as_a_string_is_that_one_product():
    """``gpu_products={"b200": "NVIDIA-B200"}`` means one product value, not one per letter."""
    spec = GpuPodSpec.parse(1, gpu_type="b200", gpu_products={"b200": "NVIDIA-B200"})  # type: ignore[dict-item]
    assert spec.products == ("NVIDIA-B200",)


def test_a_gpu_pod_spec_built_directly_is_validated_on_construction():
    """The class docstring promises validation on construction: an unknown data affinity would silently
    drop the datasets' affinity, and a pod needs whole GPUs."""
    with pytest.raises(GpuPodSpecError, match="data_affinity 'must' must be 'prefer'"):
        GpuPodSpec(gpus=1, datasets=("c4",), data_affinity="must")  # type: ignore[arg-type]
    for gpus in (0, True, 1.5):
        with pytest.raises(GpuPodSpecError, match="must be a whole number of GPUs >= 1"):
            GpuPodSpec(gpus=gpus)  # type: ignore[arg-type]
    assert GpuPodSpec(gpus=2, datasets=("c4",), data_affinity="require").gpus == 2


def test_a_gpu_pod_spec_is_immutable():
    spec = GpuPodSpec.parse(2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.gpus = 4  # type: ignore[misc]


@pytest.mark.parametrize(
    ("kwargs", "text"),
    [
        (
            {"gpus": 4, "gpu_memory": "80GiB", "gpu_type": "a100", "datasets": ["c4"]},
            "4x a100 (80GiB each), prefer data c4",
        ),
        ({"gpus": 1}, "1x GPU"),
        ({"gpus": 2, "datasets": ["c4", "wiki"], "data_affinity": "require"}, "2x GPU, require data c4,wiki"),
    ],
)
def test_describe_is_the_short_form_for_logs(kwargs, text):
    assert GpuPodSpec.parse(**kwargs).describe() == text


# -- dataset_label --------------------------------------------------------------------------------------


def test_dataset_names_up_to_55_characters_give_a_valid_label_key_and_longer_ones_say_the_limit():
    """The label name part 'dataset-<name>' may have 63 characters: 55 are left for the dataset."""
    for name in ("d" * 55, "imagenet_2012", "c4.en"):
        key = dataset_label(name)
        assert key == f"gpu-dag.io/dataset-{name}" and _is_label_key(key)
    with pytest.raises(GpuPodSpecError, match="use at most 55 characters"):
        dataset_label("d" * 56)


@pytest.mark.parametrize("name", [None, 5, ("c4",)])
def test_a_dataset_name_that_is_not_a_string_raises_gpu_pod_spec_error(name):
    with pytest.raises(GpuPodSpecError, match=r"dataset name .* cannot be part of the node label"):
        dataset_label(name)  # type: ignore[arg-type]


def test_a_dataset_name_with_a_trailing_newline_is_refused():
    """'gpu-dag.io/dataset-c4\\n' is no label key: the API server would reject the pod's node affinity."""
    assert not _is_label_key("gpu-dag.io/dataset-c4\n")
    with pytest.raises(GpuPodSpecError):
        dataset_label("c4\n")


# -- merging into what the user gave ----------------------------------------------------------------------


def test_no_user_resources_give_gpus_in_requests_and_limits_only():
    merged = merge_resources(None, 8)
    assert SER(merged) == {"requests": {GPU_RESOURCE: "8"}, "limits": {GPU_RESOURCE: "8"}}


def test_user_resource_requirements_are_copied_with_their_claims_not_written_into():
    user = k8s.V1ResourceRequirements(
        requests={"cpu": "8"}, limits={GPU_RESOURCE: "2"}, claims=[k8s.CoreV1ResourceClaim(name="gpu-claim")]
    )
    merged = merge_resources(user, 2)
    assert SER(merged) == {
        "requests": {"cpu": "8", GPU_RESOURCE: "2"},
        "limits": {GPU_RESOURCE: "2"},
        "claims": [{"name": "gpu-claim"}],
    }
    assert user.requests == {"cpu": "8"}  # the user's object (maybe shared by tasks) is unchanged


def test_a_conflicting_gpu_request_names_the_field_and_both_counts():
    with pytest.raises(GpuPodSpecError) as err:
        merge_resources(k8s.V1ResourceRequirements(requests={GPU_RESOURCE: "4"}), 2)
    assert str(err.value) == (
        "container_resources.requests has nvidia.com/gpu='4' but gpus=2; set the GPU count only through gpus="
    )


def test_container_resources_of_another_type_name_the_accepted_types():
    with pytest.raises(
        GpuPodSpecError, match=r"container_resources has type list; pass a kubernetes\.client"
    ):
        merge_resources([{"limits": {"cpu": "1"}}], 1)  # type: ignore[arg-type]


def test_preferred_terms_alone_add_no_required_node_affinity():
    """An empty required selector would be rejected: only preferredDuring... is set."""
    spec = GpuPodSpec.parse(1, datasets="c4")
    merged = SER(merge_affinity(None, spec.required_node_requirements(), spec.preferred_terms()))
    assert merged == {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "preference": {"matchExpressions": [{"key": dataset_label("c4"), "operator": "Exists"}]},
                }
            ]
        }
    }


def test_user_preferred_terms_come_first_and_the_user_object_is_left_unchanged():
    user_term = k8s.V1PreferredSchedulingTerm(
        weight=10,
        preference=k8s.V1NodeSelectorTerm(
            match_expressions=[k8s.V1NodeSelectorRequirement(key="spot", operator="DoesNotExist")]
        ),
    )
    user = k8s.V1Affinity(
        node_affinity=k8s.V1NodeAffinity(preferred_during_scheduling_ignored_during_execution=[user_term])
    )
    spec = GpuPodSpec.parse(1, gpu_type="l4", datasets="c4")
    merged = merge_affinity(user, spec.required_node_requirements(), spec.preferred_terms())
    preferred = merged.node_affinity.preferred_during_scheduling_ignored_during_execution
    assert [(t.weight, t.preference.match_expressions[0].key) for t in preferred] == [
        (10, "spot"),
        (100, dataset_label("c4")),
    ]
    assert user.node_affinity.preferred_during_scheduling_ignored_during_execution == [user_term]
    assert user.node_affinity.required_during_scheduling_ignored_during_execution is None
    assert merge_affinity(user, [], []) is user  # nothing to add: the user's affinity as given


def test_a_requirement_already_in_a_term_is_not_repeated_and_match_fields_are_kept():
    spec = GpuPodSpec.parse(1, gpu_type="t4")
    (product,) = spec.required_node_requirements()
    host = k8s.V1NodeSelectorRequirement(key="metadata.name", operator="In", values=["node-7"])
    user = k8s.V1Affinity(
        node_affinity=k8s.V1NodeAffinity(
            required_during_scheduling_ignored_during_execution=k8s.V1NodeSelector(
                node_selector_terms=[
                    k8s.V1NodeSelectorTerm(match_expressions=[product]),
                    k8s.V1NodeSelectorTerm(match_fields=[host]),
                ]
            )
        )
    )
    merged = SER(merge_affinity(user, [product], []))
    assert merged["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] == [
        {"matchExpressions": [SER(product)]},
        {"matchExpressions": [SER(product)], "matchFields": [SER(host)]},
    ]


def test_a_user_toleration_of_the_gpu_taint_is_kept_and_no_second_one_added():
    user = [
        k8s.V1Toleration(key="dedicated", operator="Equal", value="ml", effect="NoSchedule"),
        k8s.V1Toleration(key=GPU_RESOURCE, operator="Equal", value="present", effect="NoSchedule"),
    ]
    assert merge_tolerations(user) == user
    other = [user[0]]
    merged = merge_tolerations(other)
    assert merged == [user[0], gpu_toleration()] and other == [user[0]]  # the user's list is not appended to


def test_a_pod_built_from_every_piece_is_valid_for_kubernetes():
    """The merged resources, affinity (user terms with matchFields, preferred data) and tolerations pass the
    Kubernetes 1.37 OpenAPI schema in strict mode, and every node-affinity key is a valid label key."""
    spec = GpuPodSpec.parse(4, "80GiB", "a100", datasets=["c4-en", "d" * 55], data_affinity="prefer")
    user_affinity = k8s.V1Affinity(
        node_affinity=k8s.V1NodeAffinity(
            required_during_scheduling_ignored_during_execution=k8s.V1NodeSelector(
                node_selector_terms=[
                    k8s.V1NodeSelectorTerm(
                        match_fields=[
                            k8s.V1NodeSelectorRequirement(key="metadata.name", operator="In", values=["n1"])
                        ]
                    )
                ]
            )
        )
    )
    pod = k8s.V1Pod(
        api_version="v1",
        kind="Pod",
        metadata=k8s.V1ObjectMeta(name="train"),
        spec=k8s.V1PodSpec(
            containers=[
                k8s.V1Container(
                    name="base",
                    image="ghcr.io/acme/train:1",
                    resources=merge_resources(
                        {"requests": {"cpu": "8"}, "claims": [{"name": "gpu"}]}, spec.gpus
                    ),
                )
            ],
            resource_claims=[k8s.V1PodResourceClaim(name="gpu", resource_claim_name="gpu-claim")],
            affinity=merge_affinity(user_affinity, spec.required_node_requirements(), spec.preferred_terms()),
            tolerations=merge_tolerations([k8s.V1Toleration(key="spot", operator="Exists")]),
        ),
    )
    manifest = SER(pod)
    _validate(manifest)
    node = manifest["spec"]["affinity"]["nodeAffinity"]
    keys = [
        e["key"]
        for e in node["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0][
            "matchExpressions"
        ]
    ]
    keys += [
        t["preference"]["matchExpressions"][0]["key"]
        for t in node["preferredDuringSchedulingIgnoredDuringExecution"]
    ]
    assert keys == [
        GPU_PRODUCT_LABEL,
        GPU_MEMORY_LABEL,
        "gpu-dag.io/dataset-c4-en",
        f"gpu-dag.io/dataset-{'d' * 55}",
    ]
    assert all(_is_label_key(k) for k in keys)
    assert [t["key"] for t in manifest["spec"]["tolerations"]] == ["spot", GPU_RESOURCE]
