"""Arguments a GPU pod shares with other tasks or takes from elsewhere, each a case it got wrong.

* one ``V1Affinity`` object shared by two tasks (a module constant) was written into: both pods then
  required every GPU type of both tasks and could never be scheduled."""

from __future__ import annotations

import inspect
from unittest import mock

import pytest
from airflow.providers.cncf.kubernetes.operators.kueue import KubernetesStartKueueJobOperator

from airflow_gpu_dag.kubernetes.pod_kwargs import GPU_ARGS, pod_where, with_defaults
from airflow_gpu_dag.operators.kubernetes import GpuKubernetesPodOperator, GpuPodConfigError, gpu_pod_kwargs
from tests.unit.operators.conftest import SER, _context, _dag, _validate, pod_dag


def test_sizes_of_a_mode_not_asked_for_are_refused() -> None:
    import pytest

    from airflow_gpu_dag.operators.kubernetes import GpuPodConfigError

    with _dag():
        with pytest.raises(GpuPodConfigError, match="only apply with volcano=True"):
            GpuKubernetesPodOperator(task_id="a", image="x", gpus=1, volcano_gang_size=4)
        with pytest.raises(GpuPodConfigError, match="kueue_pod_group_size needs kueue_pod_group"):
            GpuKubernetesPodOperator(
                task_id="b", image="x", gpus=1, kueue=True, kueue_queue="q", kueue_pod_group_size=2
            )


def test_a_gpu_type_without_letters_is_a_config_error_naming_the_task() -> None:
    # gpu_type="!!!" (or such a gpu_products key) gives no pool name: a GpuPodConfigError naming the
    # DAG and task, not a bare ValueError from the pool naming.
    with pod_dag("bad_type"):
        with pytest.raises(GpuPodConfigError, match=r"bad_type\.t1: .*'!!!'"):
            GpuKubernetesPodOperator(task_id="t1", image="i", gpus=1, gpu_type="!!!")
        with pytest.raises(GpuPodConfigError, match=r"bad_type\.t2: .*'\?\?'"):
            GpuKubernetesPodOperator(
                task_id="t2", image="i", gpus=1, gpu_type="b200", gpu_products={"??": ["NVIDIA-B200"]}
            )


@pytest.mark.parametrize("name", ["Nightly_Eval", "nightly eval", "-eval", "x" * 254])
def test_an_existing_pod_group_name_that_cannot_exist_is_refused(name: str) -> None:
    # No PodGroup can be named "Nightly_Eval": written into the pod's scheduling.k8s.io/group-name
    # annotation, it would make the pod wait until schedule_timeout_seconds and fail as "not
    # scheduled" (and the fallback ladder move on).
    with pod_dag("pg"), pytest.raises(GpuPodConfigError, match=r"pg\.t: volcano_pod_group"):
        GpuKubernetesPodOperator(task_id="t", image="i", gpus=1, volcano=True, volcano_pod_group=name)


def test_an_unknown_built_in_type_says_gpu_products_replaced_the_built_ins() -> None:
    """``gpu_products={"b200": [...]}`` with ``gpu_type="a100"``: the error told the user to add a100 one
    key at a time, never that the task's gpu_products had replaced the built-in mapping."""
    with pytest.raises(GpuPodConfigError, match=r"replaces the built-in types.*DEFAULT_GPU_PRODUCTS"):
        GpuKubernetesPodOperator(
            task_id="c", image="x", gpus=8, gpu_type="a100", gpu_products={"b200": ["NVIDIA-B200"]}
        )
    with pytest.raises(GpuPodConfigError, match=r"Pass gpu_products=\{'mi300'"):
        GpuKubernetesPodOperator(task_id="d", image="x", gpus=8, gpu_type="mi300")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"gpus": 0}, r"k8s_gpu\.bad: GPU count 0 must be at least 1"),
        ({"gpus": -1}, "at least 1"),
        ({"gpus": 1, "gpu_type": "b300"}, r"unknown gpu_type 'b300'.*gpu_products="),
        ({"gpus": 1, "gpu_memory": "eighty gigs"}, "cannot be parsed"),
        ({"gpus": 1, "data_affinity": "always", "datasets": ["x"]}, "'prefer'"),
        ({"gpus": 1, "volcano": True}, "volcano_queue="),
        ({"gpus": 1, "volcano_queue": "q"}, "add volcano=True"),
        ({"gpus": 1, "volcano": True, "volcano_queue": "q", "volcano_gang_size": 3}, "volcano_gang="),
        (
            {"gpus": 1, "volcano": True, "volcano_queue": "q", "schedulername": "yunikorn"},
            "remove schedulername",
        ),
        (
            {"gpus": 1, "volcano": True, "volcano_gang": "g", "volcano_pod_group": "p", "volcano_queue": "q"},
            "not both",
        ),
        ({"gpus": 1, "kueue": True}, "kueue_queue="),
        ({"gpus": 1, "kueue_queue": "q"}, "add kueue=True"),
        ({"gpus": 1, "kueue": True, "kueue_queue": "bad queue"}, "label value"),
        ({"gpus": 1, "kueue": True, "kueue_queue": "q", "volcano": True, "volcano_queue": "q"}, "not both"),
        ({"gpus": 2, "container_resources": {"limits": {"nvidia.com/gpu": "4"}}}, "only through gpus="),
    ],
)
def test_bad_input_fails_at_parse_time_naming_dag_task_and_fix(kwargs, match):
    with _dag(), pytest.raises(GpuPodConfigError, match=match) as err:
        GpuKubernetesPodOperator(task_id="bad", image="i", **kwargs)
    assert "k8s_gpu.bad" in str(err.value)


def test_gpu_pod_kwargs_reuse_the_providers_kueue_job_operator():
    with _dag("kueue_job") as dag:
        op = KubernetesStartKueueJobOperator(
            queue_name="team-a",
            **gpu_pod_kwargs(
                task_id="train_job",
                image="i",
                namespace="ml",
                gpus=4,
                gpu_type="h100",
                datasets=["c4"],
                duration="1h",
            ),
        )
    hook = mock.Mock(is_in_cluster=False)
    op.__dict__["hook"] = hook
    job = SER(op.build_job_request_obj(_context(dag, op.task_id)))
    _validate(job)
    assert job["spec"]["suspend"] is True
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    template = job["spec"]["template"]["spec"]
    assert template["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "4"
    assert op.pool == "gpu_h100" and op.pool_slots == 4


# -- pod_kwargs' helpers, directly ----------------------------------------------------------------------
GPU_TOL = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
ZONE_IN_A = {"key": "zone", "operator": "In", "values": ["a"]}
TEAM_TOL = {"key": "team", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}


def test_with_defaults_fills_only_the_merged_args_the_task_does_not_give() -> None:
    defaults = {"tolerations": [TEAM_TOL], "labels": {"team": "ml"}, "pool": "cpu", "retries": 3}
    kwargs = {"task_id": "t", "labels": {"own": "1"}, "default_args": defaults}
    filled = with_defaults(kwargs)
    assert filled == {**kwargs, "tolerations": [TEAM_TOL]}  # not pool (a GPU pod's follows its GPUs)
    assert "tolerations" not in kwargs  # the caller's dict is not changed


@pytest.mark.parametrize("kwargs", [{"task_id": "t"}, {"task_id": "t", "default_args": None}])
def test_with_defaults_without_default_args_returns_the_kwargs_unchanged(kwargs: dict) -> None:
    assert with_defaults(kwargs) is kwargs


def test_pod_where_names_the_dag_and_the_task_or_says_which_is_missing() -> None:
    assert pod_where({}) == "GpuKubernetesPodOperator <no dag>.<no task_id>"
    with pod_dag("nightly_é"):
        assert pod_where({"task_id": "train"}) == "GpuKubernetesPodOperator nightly_é.train"
    assert pod_where({"task_id": "t", "dag": pod_dag("given")}) == "GpuKubernetesPodOperator given.t"


def test_gpu_args_are_exactly_the_gpu_parameters_of_gpu_pod_kwargs() -> None:
    """``GPU_ARGS`` tells the operator which arguments are not the base operator's: a parameter
    added to one and not the other would be passed to ``KubernetesPodOperator`` (or dropped)."""
    params = inspect.signature(gpu_pod_kwargs).parameters
    assert set(GPU_ARGS) == {name for name, p in params.items() if p.kind is p.KEYWORD_ONLY}


def test_gpu_pod_kwargs_sets_the_gpu_pool_slots_resources_toleration_and_hints() -> None:
    out = gpu_pod_kwargs(task_id="t", image="i", gpus=2, gpu_type="A100", duration="1h", inputs="/lake/a")
    assert (out["task_id"], out["image"], out["pool"], out["pool_slots"]) == ("t", "i", "gpu_a100", 2)
    assert SER(out["container_resources"]) == {
        "limits": {"nvidia.com/gpu": "2"},
        "requests": {"nvidia.com/gpu": "2"},
    }
    assert SER(out["tolerations"]) == [GPU_TOL]
    terms = SER(out["affinity"])["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchExpressions"][0]["key"] == "nvidia.com/gpu.product"
    assert out["executor_config"] == {
        "gpu_dag": {"gpus": 2, "gpu_type": "a100", "duration_s": 3600.0, "inputs": ["/lake/a"]}
    }


def test_without_gpu_type_or_datasets_no_affinity_is_added() -> None:
    assert "affinity" not in gpu_pod_kwargs(task_id="t", gpus=1)


def test_the_authors_pool_and_pool_slots_win_even_when_falsy() -> None:
    out = gpu_pod_kwargs(task_id="t", gpus=4, gpu_type="h100", pool="", pool_slots=0)
    assert (out["pool"], out["pool_slots"]) == ("", 0)
    out = gpu_pod_kwargs(task_id="t", gpus=4, pool=None, pool_slots=None)
    assert (out["pool"], out["pool_slots"]) == ("gpu_default", 4)


def test_the_authors_own_pod_arguments_are_merged_not_replaced() -> None:
    kwargs: dict = {
        "tolerations": [TEAM_TOL],
        "container_resources": {"requests": {"cpu": "4"}, "limits": {"memory": "8Gi"}},
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
                    ]
                }
            }
        },
        "executor_config": {"pod_override": {"x": 1}, "gpu_dag": {"outputs": ["/o"]}},
    }
    out = gpu_pod_kwargs(task_id="t", gpus=2, gpu_type="a100", **kwargs)
    assert SER(out["tolerations"]) == [TEAM_TOL, GPU_TOL]
    assert SER(out["container_resources"]) == {
        "limits": {"memory": "8Gi", "nvidia.com/gpu": "2"},
        "requests": {"cpu": "4", "nvidia.com/gpu": "2"},
    }
    (term,) = SER(out["affinity"])["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert [e["key"] for e in term["matchExpressions"]] == ["zone", "nvidia.com/gpu.product"]  # ANDed
    assert out["executor_config"]["pod_override"] == {"x": 1}
    assert out["executor_config"]["gpu_dag"]["outputs"] == ["/o"]
    assert kwargs["tolerations"] == [TEAM_TOL]
    assert kwargs["executor_config"]["gpu_dag"] == {"outputs": ["/o"]}


def test_an_authors_gpu_toleration_is_not_doubled() -> None:
    own = {"key": "nvidia.com/gpu", "operator": "Equal", "value": "x", "effect": "NoExecute"}
    assert SER(gpu_pod_kwargs(task_id="t", gpus=1, tolerations=[own])["tolerations"]) == [own]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"gpus": None}, r"gpus is required.*gpus=4"),
        ({"gpus": 1.5}, "whole number"),
        ({"gpus": True}, "whole number"),
        ({"gpus": 2**70}, "out of range"),
        ({"gpus": 1, "gpu_memory": float("nan")}, "finite size"),
        ({"gpus": 1, "gpu_memory": float("inf")}, "finite size"),
        ({"gpus": 1, "gpu_type": "ä100"}, "not ASCII"),
        ({"gpus": 1, "datasets": 5}, "not iterable"),
        ({"gpus": 1, "container_resources": "4 cpus"}, "V1ResourceRequirements or a dict"),
    ],
)
def test_bad_gpu_arguments_of_gpu_pod_kwargs_name_the_dag_and_task(kwargs: dict, match: str) -> None:
    with pod_dag("jobs"), pytest.raises(GpuPodConfigError, match=match) as err:
        gpu_pod_kwargs(task_id="train", image="i", **kwargs)
    assert str(err.value).startswith("GpuKubernetesPodOperator jobs.train: ")


@pytest.mark.parametrize("tolerations", [[42], ["team=ml:NoSchedule"]])
def test_a_toleration_that_is_no_dict_is_a_config_error_naming_the_task(tolerations: list) -> None:
    """``convert_toleration`` raises ``AirflowException: Expected dict or V1Toleration, got <class
    'int'>``, which ``with_gpu_parts`` does not turn into a ``GpuPodConfigError``."""
    with pod_dag("jobs"), pytest.raises(GpuPodConfigError, match=r"jobs\.train: .*toleration"):
        gpu_pod_kwargs(task_id="train", gpus=1, tolerations=tolerations)


def test_gpu_products_that_are_no_mapping_are_a_config_error_naming_the_task() -> None:
    with pod_dag("jobs"), pytest.raises(GpuPodConfigError, match=r"jobs\.train: .*gpu_products"):
        gpu_pod_kwargs(task_id="train", gpus=1, gpu_type="a100", gpu_products=["a100"])  # type: ignore[arg-type]


def test_gpu_pod_kwargs_keep_the_dags_default_tolerations_and_pod_override() -> None:
    """``with_defaults`` exists because DAG-wide tolerations were silently replaced by the GPU one; the
    GPU operator applies it, but ``gpu_pod_kwargs`` (the documented way to build a Kueue Job) gives
    ``tolerations`` and ``executor_config`` explicitly, so Airflow never fills the DAG's."""
    defaults = {"tolerations": [TEAM_TOL], "executor_config": {"pod_override": {"x": 1}}}
    with pod_dag("jobs", default_args=defaults):
        op = KubernetesStartKueueJobOperator(
            queue_name="team-a", **gpu_pod_kwargs(task_id="train", image="i", gpus=1)
        )
    assert [t["key"] if isinstance(t, dict) else t.key for t in op.tolerations] == ["team", "nvidia.com/gpu"]
    assert op.executor_config.get("pod_override") == {"x": 1}
