"""Arguments a GPU pod shares with other tasks or takes from elsewhere, each a case it got wrong.

* one ``V1Affinity`` object shared by two tasks (a module constant) was written into: both pods then
  required every GPU type of both tasks and could never be scheduled."""

from __future__ import annotations

from unittest import mock

import pytest
from airflow.providers.cncf.kubernetes.operators.kueue import KubernetesStartKueueJobOperator

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
