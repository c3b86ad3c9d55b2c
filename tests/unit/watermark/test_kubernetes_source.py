"""Tests of ``airflow_gpu_dag.watermark.kubernetes_source``."""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes.client import (
    V1Container,
    V1Node,
    V1NodeCondition,
    V1NodeList,
    V1NodeSpec,
    V1NodeStatus,
    V1ObjectMeta,
    V1Pod,
    V1PodList,
    V1PodSpec,
    V1ResourceRequirements,
)

from airflow_gpu_dag.watermark.config import parse_config
from airflow_gpu_dag.watermark.kubernetes_source import pod_request
from airflow_gpu_dag.watermark.sources import KubernetesSource, SourceError
from tests.unit.watermark.conftest import FakeCoreV1, gpu_container


# -- Kubernetes -----------------------------------------------------------------------------------
def _node(name: str, gpus: str, ready: bool = True, unschedulable: bool = False) -> V1Node:
    return V1Node(
        metadata=V1ObjectMeta(name=name, labels={"gpu": "a100"}),
        spec=V1NodeSpec(unschedulable=unschedulable),
        status=V1NodeStatus(
            allocatable={"nvidia.com/gpu": gpus, "cpu": "64"},
            conditions=[V1NodeCondition(type="Ready", status="True" if ready else "False")],
        ),
    )


def _pod(node: str, gpus: int, labels: dict[str, str] | None = None) -> V1Pod:
    resources = V1ResourceRequirements(limits={"nvidia.com/gpu": str(gpus)})
    return V1Pod(
        metadata=V1ObjectMeta(name=f"p{gpus}", labels=labels),
        spec=V1PodSpec(node_name=node, containers=[V1Container(name="base", resources=resources)]),
    )


@pytest.mark.usefixtures("_own_lease_dir")
def test_kubernetes_allocatable_minus_foreign_pods() -> None:
    api = FakeCoreV1(
        nodes=[
            _node("n1", "8"),
            _node("n2", "8"),
            _node("down", "8", ready=False),
            _node("cord", "8", True, True),
        ],
        pods=[
            _pod("n1", 2),  # someone else's job: not available to Airflow
            _pod(
                "n2", 4, {"kubernetes_pod_operator": "True", "dag_id": "x"}
            ),  # ours: the pool accounts for it
            _pod("down", 8),  # on a node not counted
            _pod("elsewhere", 1),
        ],
    )
    reading = KubernetesSource(label_selector="gpu=a100", api=api).read()
    assert reading.gpus == 14
    assert reading.detail == "kubernetes 14 = 16 allocatable on 2 nodes - 2 held"
    assert ("list_node", "gpu=a100") in api.calls
    assert ("list_pod", "status.phase!=Succeeded,status.phase!=Failed") in api.calls


@pytest.mark.usefixtures("_own_lease_dir")
def test_kubernetes_api_failure_is_a_source_error() -> None:
    api = FakeCoreV1([], [], fail=RuntimeError("connection refused\ntraceback"))
    with pytest.raises(SourceError, match=r"kubernetes API: RuntimeError: connection refused$"):
        KubernetesSource(api=api).read()


@pytest.mark.usefixtures("_own_lease_dir")
def test_the_kubernetes_requests_share_the_sources_timeout() -> None:
    class SlowNodes(FakeCoreV1):
        def __init__(self, delay: float) -> None:
            super().__init__([_node("n1", "8")], [])
            self.delay = delay
            self.timeouts: list[float] = []

        def list_node(self, label_selector: str | None = None, _request_timeout: Any = None) -> V1NodeList:
            self.timeouts.append(_request_timeout)
            time.sleep(self.delay)
            return super().list_node(label_selector, _request_timeout)

        def list_pod_for_all_namespaces(
            self, field_selector: str | None = None, _request_timeout: Any = None
        ) -> V1PodList:
            self.timeouts.append(_request_timeout)
            return super().list_pod_for_all_namespaces(field_selector, _request_timeout)

    api = SlowNodes(delay=0.3)
    assert KubernetesSource(api=api, timeout=2.0).read().gpus == 8
    first, second = api.timeouts
    assert 1.5 < first <= 2.0 and second <= first - 0.3  # the second gets what the first left
    api = SlowNodes(delay=0.6)
    with pytest.raises(SourceError, match=r"kubernetes API: no complete answer within 0.5s"):
        KubernetesSource(api=api, timeout=0.5).read()
    assert len(api.timeouts) == 1  # no second request once the time is spent


# -- Kubernetes: per-node accounting ------------------------------------------------------------------
def _ready_node(name: str, gpus: str) -> V1Node:
    return V1Node(
        metadata=V1ObjectMeta(name=name),
        spec=V1NodeSpec(),
        status=V1NodeStatus(
            allocatable={"nvidia.com/gpu": gpus},
            conditions=[V1NodeCondition(type="Ready", status="True")],
        ),
    )


def _foreign_pod(node: str, gpus: int) -> V1Pod:
    resources = V1ResourceRequirements(limits={"nvidia.com/gpu": str(gpus)})
    return V1Pod(
        metadata=V1ObjectMeta(name=f"foreign-{node}"),
        spec=V1PodSpec(node_name=node, containers=[V1Container(name="c", resources=resources)]),
    )


class _Api:
    def __init__(self, nodes: list[V1Node], pods: list[V1Pod]) -> None:
        self.nodes, self.pods = nodes, pods

    def list_node(self, label_selector: str | None = None, _request_timeout: Any = None) -> V1NodeList:
        return V1NodeList(items=self.nodes)

    def list_pod_for_all_namespaces(
        self, field_selector: str | None = None, _request_timeout: Any = None
    ) -> V1PodList:
        return V1PodList(items=self.pods)


def test_kubernetes_pods_over_a_nodes_allocatable_hold_nothing_elsewhere() -> None:
    """The device plugin marked n1's GPUs unhealthy (allocatable 0) after a foreign 4-GPU pod was
    scheduled there: n2's 8 free GPUs are still all usable."""
    api = _Api(
        [_ready_node("n1", "0"), _ready_node("n2", "8"), _ready_node("n3", "4")],
        [_foreign_pod("n1", 4), _foreign_pod("n3", 1)],
    )
    reading = KubernetesSource(api=api).read()
    assert reading.gpus == 11
    assert reading.detail == "kubernetes 11 = 12 allocatable on 3 nodes - 1 held"


def test_kubernetes_client_is_built_again_after_a_401(monkeypatch: pytest.MonkeyPatch) -> None:
    """The hook's client holds the credentials of the connection when it was built: after a 401 the
    next read builds it again (a rotated token), instead of failing until the controller restarts."""
    from kubernetes.client.exceptions import ApiException

    class Expired(_Api):
        def list_node(self, label_selector: str | None = None, _request_timeout: Any = None) -> V1NodeList:
            raise ApiException(status=401, reason="Unauthorized")

    clients: list[_Api] = [Expired([], []), _Api([_ready_node("n1", "8")], [])]
    built: list[dict[str, Any]] = []

    class FakeHook:
        def __init__(self, **kwargs: Any) -> None:
            built.append(kwargs)
            self.core_v1_client = clients[len(built) - 1]

    import airflow.providers.cncf.kubernetes.hooks.kubernetes as hooks

    monkeypatch.setattr(hooks, "KubernetesHook", FakeHook)
    source = KubernetesSource(kubernetes_conn_id="k8s_gpu")
    with pytest.raises(SourceError, match="401"):
        source.read()
    assert source.read().gpus == 8
    assert len(built) == 2
    # a client given by the caller is kept
    given = Expired([], [])
    fixed = KubernetesSource(api=given)
    with pytest.raises(SourceError):
        fixed.read()
    assert fixed._client() is given


# -- kubernetes -----------------------------------------------------------------------------------
class _HangingApi:
    """As the real client: without ``_request_timeout`` a dead connection never answers."""

    def __init__(self) -> None:
        self.timeouts: list[Any] = []

    def list_node(self, label_selector: str | None = None, _request_timeout: Any = None) -> V1NodeList:
        self.timeouts.append(_request_timeout)
        if _request_timeout is None:
            raise AssertionError("list_node without a timeout would hang on a dead connection")
        return V1NodeList(items=[])

    def list_pod_for_all_namespaces(
        self, field_selector: str | None = None, _request_timeout: Any = None
    ) -> V1PodList:
        self.timeouts.append(_request_timeout)
        if _request_timeout is None:
            raise AssertionError("list_pod without a timeout would hang on a dead connection")
        return V1PodList(items=[])


def test_kubernetes_requests_carry_a_timeout() -> None:
    api = _HangingApi()
    assert KubernetesSource(api=api).read().gpus == 0
    assert 14.0 < api.timeouts[0] <= 15.0 and 0 < api.timeouts[1] <= api.timeouts[0]  # both within 15 s
    config = parse_config({"pools": {"gpu_k": {"source": {"type": "kubernetes", "timeout": "30s"}}}})
    assert config.pools[0].source.options["timeout"] == 30.0
    api = _HangingApi()
    KubernetesSource(api=api, timeout=config.pools[0].source.options["timeout"]).read()
    assert 29.0 < api.timeouts[0] <= 30.0 and 0 < api.timeouts[1] <= api.timeouts[0]


# -- Kubernetes -------------------------------------------------------------------------------------


def test_pod_request_counts_init_containers_like_the_scheduler() -> None:
    spec = V1PodSpec(
        containers=[gpu_container("a", "1"), gpu_container("b", "2", limits_only=True)],
        init_containers=[gpu_container("i", "4")],
    )
    assert pod_request(spec) == 4  # max(init 4, apps 1 + 2)
    spec = V1PodSpec(
        containers=[gpu_container("a", "3")],
        init_containers=[gpu_container("i", "2"), gpu_container("j", None)],
    )
    assert pod_request(spec) == 3
    sidecar = V1PodSpec(
        containers=[gpu_container("a", "2")],
        init_containers=[gpu_container("s", "1", "Always"), gpu_container("i", "2")],
    )
    assert pod_request(sidecar) == 3  # the sidecar runs next to the app (and next to init i)
    assert pod_request(V1PodSpec(containers=[gpu_container("a", "1k")])) == 1000  # parse_quantity
    assert pod_request(V1PodSpec(containers=[gpu_container("a", "lots")])) == 0


# -- direct tests: options, node and pod edge cases, errors, quantities -------------------------------
def _pod_on(node: str | None, *containers: V1Container, labels: dict[str, str] | None = None) -> V1Pod:
    return V1Pod(
        metadata=V1ObjectMeta(name="p", labels=labels),
        spec=V1PodSpec(node_name=node, containers=list(containers)),
    )


def test_airflow_pod_labels_given_as_a_string_is_refused_with_the_fix() -> None:
    with pytest.raises(ValueError, match=r"airflow_pod_labels must be a list like \[team\], not a string"):
        KubernetesSource(api=FakeCoreV1([], []), airflow_pod_labels="team")


def test_an_empty_label_selector_lists_every_node() -> None:
    api = FakeCoreV1([_ready_node("n1", "2")], [])
    assert KubernetesSource(api=api).read().gpus == 2
    assert api.calls[0] == ("list_node", None)


def test_a_custom_resource_is_counted_instead_of_nvidia_gpus() -> None:
    node = _ready_node("n1", "8")
    node.status.allocatable["amd.com/gpu"] = "4"
    pod = _pod_on("n1", gpu_container("c", "3"))  # nvidia.com/gpu: not the resource counted
    amd = V1Container(name="a", resources=V1ResourceRequirements(limits={"amd.com/gpu": "1"}))
    api = FakeCoreV1([node], [pod, _pod_on("n1", amd)])
    reading = KubernetesSource(api=api, resource="amd.com/gpu").read()
    assert reading.detail == "kubernetes 3 = 4 allocatable on 1 nodes - 1 held"


def test_custom_airflow_pod_labels_replace_the_defaults() -> None:
    api = FakeCoreV1(
        [_ready_node("n1", "8")],
        [
            _pod_on("n1", gpu_container("c", "2"), labels={"team-ml": "yes"}),  # ours now
            _pod_on(
                "n1", gpu_container("c", "1"), labels={"kubernetes_pod_operator": "True"}
            ),  # not any more
        ],
    )
    assert KubernetesSource(api=api, airflow_pod_labels=["team-ml"]).read().gpus == 7
    assert KubernetesSource(api=api, airflow_pod_labels=[]).read().gpus == 5  # no pod is Airflow's


def test_nodes_that_are_not_ready_or_say_nothing_do_not_count() -> None:
    unknown = _ready_node("unknown", "8")
    unknown.status.conditions = [V1NodeCondition(type="Ready", status="Unknown")]
    silent = _ready_node("silent", "8")
    silent.status.conditions = None
    pressure_only = _ready_node("pressure", "8")
    pressure_only.status.conditions = [V1NodeCondition(type="MemoryPressure", status="True")]
    no_status = V1Node(metadata=V1ObjectMeta(name="bare"), spec=None, status=None)
    api = FakeCoreV1([unknown, silent, pressure_only, no_status, _ready_node("ok", "2")], [])
    reading = KubernetesSource(api=api).read()
    assert reading.detail == "kubernetes 2 = 2 allocatable on 1 nodes - 0 held"


def test_a_ready_node_without_the_resource_counts_zero_gpus() -> None:
    cpu = _ready_node("cpu", "0")
    cpu.status.allocatable = {"cpu": "64"}
    api = FakeCoreV1([cpu, _ready_node("gpu", "4")], [_pod_on("cpu", gpu_container("c", "1"))])
    assert KubernetesSource(api=api).read().detail == "kubernetes 4 = 4 allocatable on 2 nodes - 0 held"


def test_an_unscheduled_pod_holds_nothing() -> None:
    api = FakeCoreV1([_ready_node("n1", "4")], [_pod_on(None, gpu_container("c", "4"))])
    assert KubernetesSource(api=api).read().gpus == 4


def test_fractional_requests_on_a_node_are_summed_then_rounded_up() -> None:
    pods = [_pod_on("n1", gpu_container("c", "500m")) for _ in range(3)]  # 1.5 GPUs in all
    api = FakeCoreV1([_ready_node("n1", "4")], pods)
    assert KubernetesSource(api=api).read().detail == "kubernetes 2 = 4 allocatable on 1 nodes - 2 held"


def test_a_403_builds_the_hook_client_again_but_a_500_does_not(monkeypatch: pytest.MonkeyPatch) -> None:
    from kubernetes.client.exceptions import ApiException

    class Failing(_Api):
        status = 500

        def list_node(self, label_selector: str | None = None, _request_timeout: Any = None) -> V1NodeList:
            raise ApiException(status=self.status, reason="nope")

    failing = Failing([], [])
    clients: list[_Api] = [failing, _Api([_ready_node("n1", "3")], [])]
    built: list[dict[str, Any]] = []

    class FakeHook:
        def __init__(self, **kwargs: Any) -> None:
            self.core_v1_client = clients[len(built)]
            built.append(kwargs)

    import airflow.providers.cncf.kubernetes.hooks.kubernetes as hooks

    monkeypatch.setattr(hooks, "KubernetesHook", FakeHook)
    source = KubernetesSource()
    for _ in range(2):  # a server error is no credential fault: the same client is used again
        with pytest.raises(SourceError, match=r"kubernetes API: ApiException: \(500\)"):
            source.read()
    assert len(built) == 1
    failing.status = 403  # the connection's credentials were rotated
    with pytest.raises(SourceError, match=r"\(403\)"):
        source.read()
    assert source.read().gpus == 3 and len(built) == 2
    assert built[0] == {"conn_id": "kubernetes_default", "cluster_context": None}


def test_a_hook_that_cannot_be_built_is_a_source_error_and_is_tried_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    attempts: list[dict[str, Any]] = []

    class NoConnection:
        def __init__(self, **kwargs: Any) -> None:
            attempts.append(kwargs)
            raise LookupError("The conn_id `k8s_gpu` isn't defined")

    import airflow.providers.cncf.kubernetes.hooks.kubernetes as hooks

    monkeypatch.setattr(hooks, "KubernetesHook", NoConnection)
    source = KubernetesSource(kubernetes_conn_id="k8s_gpu")  # building the client waits for a read
    assert attempts == []
    for _ in range(2):
        with pytest.raises(
            SourceError, match=r"kubernetes API: LookupError: The conn_id `k8s_gpu` isn't defined"
        ):
            source.read()
    assert len(attempts) == 2


@pytest.mark.parametrize(
    ("error", "message"),
    [
        (TimeoutError(), r"^kubernetes API: TimeoutError: $"),
        (RuntimeError("x" * 500), r"^kubernetes API: RuntimeError: x{200}$"),
        (RuntimeError("\nsecond line"), r"^kubernetes API: RuntimeError: $"),
    ],
)
def test_an_api_error_is_one_short_line(error: Exception, message: str) -> None:
    with pytest.raises(SourceError, match=message):
        KubernetesSource(api=FakeCoreV1([], [], fail=error)).read()


def test_pod_request_prefers_requests_to_limits_and_reads_nothing_as_zero() -> None:
    both = V1Container(
        name="c",
        resources=V1ResourceRequirements(requests={"nvidia.com/gpu": "1"}, limits={"nvidia.com/gpu": "2"}),
    )
    assert pod_request(V1PodSpec(containers=[both])) == 1
    assert pod_request(V1PodSpec(containers=[V1Container(name="bare")])) == 0  # no resources at all
    assert pod_request(V1PodSpec(containers=[])) == 0
    assert pod_request(None) == 0
    assert pod_request(V1PodSpec(containers=[gpu_container("c", None)])) == 0


def test_pod_request_counts_sidecars_started_before_an_init_container() -> None:
    """Sidecars s1, s2 (1 GPU each) run on while init container i (3 GPUs) runs: 5 at the init peak."""
    spec = V1PodSpec(
        containers=[gpu_container("app", "1")],
        init_containers=[
            gpu_container("s1", "1", "Always"),
            gpu_container("s2", "1", "Always"),
            gpu_container("i", "3"),
        ],
    )
    assert pod_request(spec) == 5
    after = V1PodSpec(  # a sidecar started after the init container: not alongside it
        containers=[gpu_container("app", "1")],
        init_containers=[gpu_container("i", "3"), gpu_container("s", "1", "Always")],
    )
    assert pod_request(after) == 3


@pytest.mark.parametrize("amount", ["NaN", "Infinity", "1e400"])
def test_a_quantity_that_is_not_a_finite_number_is_garbage(amount: str) -> None:
    """``parse_quantity`` accepts these; ``_quantity`` promises None or garbage is 0. As it is, a pod
    request or a node allocatable like this makes ``read`` raise ValueError/OverflowError (not even a
    SourceError) instead of a reading."""
    assert pod_request(V1PodSpec(containers=[gpu_container("c", amount)])) == 0
    api = FakeCoreV1([_ready_node("n1", "4")], [_pod_on("n1", gpu_container("c", amount))])
    assert KubernetesSource(api=api).read().gpus == 4
    api = FakeCoreV1([_ready_node("n1", amount), _ready_node("n2", "4")], [])  # allocatable too
    assert KubernetesSource(api=api).read().gpus == 4


def test_a_negative_request_never_adds_capacity() -> None:
    """The API server refuses negative requests; a fake or a proxy that passes one must not make the
    reading exceed the allocatable GPUs."""
    api = FakeCoreV1([_ready_node("n1", "4")], [_pod_on("n1", gpu_container("c", "-2"))])
    reading = KubernetesSource(api=api).read()
    assert reading.gpus <= 4, reading.detail
