"""The weights follow durations learned from past runs: read off the scheduler loop, refreshed on a bound,
never a database query inside ``get_weight``."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG
from airflow.serialization.serialized_objects import DagSerialization

from airflow_gpu_dag import CRITICAL_PATH_WEIGHT_RULE, gpu_hints
from airflow_gpu_dag.airflow.dag_reader import build_task_graph
from airflow_gpu_dag.core.analysis.estimates import DurationEstimate, with_estimates
from airflow_gpu_dag.core.model.graph import TaskGraph
from airflow_gpu_dag.core.policy.objective import DEFAULT_EPOCH, DEFAULT_OBJECTIVE, OBJECTIVES, key_of_weight
from airflow_gpu_dag.priority.learned import LearnedDurations
from airflow_gpu_dag.priority_strategy import CriticalPathPriorityStrategy
from tests.unit.conftest import record_analysis_threads

RUN_ID = "manual__2026-11-30T12:00:00+00:00"


TRIGGER = 1_796_040_000.0


@pytest.fixture
def _fresh_priority_learned(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.delenv("AIRFLOW__GPU_DAG__POOLS", raising=False)
    monkeypatch.setenv("AIRFLOW__GPU_DAG__LEARNED_DURATIONS", "true")
    CriticalPathPriorityStrategy._weights.reset()
    yield
    CriticalPathPriorityStrategy._weights.reset()


def _pipeline() -> Any:
    with DAG("wrong", default_args={"weight_rule": CRITICAL_PATH_WEIGHT_RULE}) as dag:
        prep = BashOperator(task_id="prep", bash_command="true", executor_config=gpu_hints(duration="10m"))
        train = BashOperator(task_id="train", bash_command="true", executor_config=gpu_hints(duration="2h"))
        prep >> train
    return DagSerialization.from_dict(DagSerialization.to_dict(dag))


def _remaining(sdag: Any, task_id: str) -> float:
    ti = SimpleNamespace(task=sdag.task_dict[task_id], task_id=task_id, dag_id=sdag.dag_id, run_id=RUN_ID)
    key = key_of_weight(CriticalPathPriorityStrategy().get_weight(ti), DEFAULT_EPOCH)  # type: ignore[arg-type]
    assert key is not None
    # key = trigger - c x remaining - U x min(descendant lead, K) (no pools: W = 0); prep has train below
    objective = OBJECTIVES[DEFAULT_OBJECTIVE]
    ahead = objective.descendant_unit * min({"prep": 1}.get(task_id, 0), objective.descendant_cap)
    return (TRIGGER - key - ahead) / objective.chain


class FakeHistory:
    """What ``learned_task_graph`` would read: train really takes ``train_s``; counts reads and threads."""

    def __init__(self, train_s: float) -> None:
        self.train_s = train_s
        self.threads: list[str] = []

    def __call__(self, dag: Any) -> tuple[TaskGraph, int]:
        self.threads.append(threading.current_thread().name)
        graph, _ = build_task_graph(dag)
        learned = DurationEstimate("train", 7200.0, 7200.0, learned=self.train_s, runs=5)
        return with_estimates(graph, {"train": learned}), 1


def _use(monkeypatch: pytest.MonkeyPatch, history: FakeHistory, inline: bool, refresh: str = "10m") -> None:
    """The strategy's learned durations read from ``history`` (the settings say inline or not, and the
    refresh bound, so the strategy keeps this reader)."""
    monkeypatch.setenv("AIRFLOW__GPU_DAG__PLAN_IN_BACKGROUND", "false" if inline else "true")
    monkeypatch.setenv("AIRFLOW__GPU_DAG__LEARNED_REFRESH", refresh)
    weights = CriticalPathPriorityStrategy._weights
    weights.reset()
    weights.settings()
    assert weights.learned is not None and weights.learned.inline is inline
    weights.learned = LearnedDurations(
        weights.learned.refresh_s, inline=inline, read=history, prepare=weights._prepare_learned
    )


def _live(name: str) -> int:
    return sum(1 for t in threading.enumerate() if t.name == name and t.is_alive())


def _until(condition: Any, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return bool(condition())


@pytest.mark.usefixtures("_fresh_priority_learned")
def test_weights_follow_learned_durations(monkeypatch: pytest.MonkeyPatch) -> None:
    sdag = _pipeline()
    history = FakeHistory(train_s=1200.0)  # declared 2h, really 20 min
    _use(monkeypatch, history, inline=True)
    assert _remaining(sdag, "prep") == 600 + 1200 and _remaining(sdag, "train") == 1200


@pytest.mark.usefixtures("_fresh_priority_learned")
def test_learning_off_keeps_the_declared_estimates(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__GPU_DAG__LEARNED_DURATIONS", "false")
    sdag = _pipeline()
    history = FakeHistory(train_s=1200.0)
    _use(monkeypatch, history, inline=True)
    assert _remaining(sdag, "prep") == 600 + 7200 and history.threads == []


@pytest.mark.usefixtures("_fresh_priority_learned")
def test_reads_happen_off_the_calling_thread_and_are_refreshed(monkeypatch: pytest.MonkeyPatch) -> None:
    sdag = _pipeline()
    history = FakeHistory(train_s=1200.0)
    _use(monkeypatch, history, inline=False, refresh="1s")
    weights = CriticalPathPriorityStrategy._weights
    # the first call does not wait for the history: declared estimates, and the read is queued
    assert _remaining(sdag, "prep") == 600 + 7200
    version = f"wrong:{weights.basis(sdag).version}"
    assert weights.learned is not None and weights.learned.wait_for(version) is not None
    # the learned graph is analysed in the background thread too; the weights follow once it is done
    deadline = time.monotonic() + 30
    while _remaining(sdag, "prep") != 600 + 1200 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _remaining(sdag, "prep") == 600 + 1200
    assert history.threads and set(history.threads) == {"gpu-dag-learned"}
    # the runs get longer; within the refresh bound the weights follow without anything asking
    history.train_s = 3000.0
    deadline = time.monotonic() + 30
    while _remaining(sdag, "prep") != 600 + 3000 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _remaining(sdag, "prep") == 600 + 3000


@pytest.mark.usefixtures("_fresh_priority_learned")
def test_a_dag_without_history_costs_one_query_and_no_new_analysis(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first runs of a new DAG: nothing to learn. The reader asks the database one LIMIT 1 question
    and builds nothing; the weights keep the declared analysis (no second O(V + E) analysis inline)."""
    import airflow_gpu_dag.airflow.history as history_module
    from airflow_gpu_dag.priority.learned import read_learned

    asked: list[str] = []
    monkeypatch.setattr(history_module, "has_history", lambda dag_id, session=None: asked.append(dag_id))

    def never(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("built a learned graph for a DAG without history")

    monkeypatch.setattr(history_module, "learned_task_graph", never)
    sdag = _pipeline()
    assert read_learned(sdag) == (None, 0) and asked == ["wrong"]

    monkeypatch.setenv("AIRFLOW__GPU_DAG__PLAN_IN_BACKGROUND", "false")
    weights = CriticalPathPriorityStrategy._weights
    weights.reset()
    weights.settings()
    assert weights.learned is not None
    weights.learned = LearnedDurations(weights.learned.refresh_s, inline=True, read=lambda dag: (None, 0))
    import airflow_gpu_dag.priority.weights as weights_module

    analyses: list[object] = []
    build = weights_module.build_basis
    monkeypatch.setattr(weights_module, "build_basis", lambda *a, **k: analyses.append(a) or build(*a, **k))
    assert _remaining(sdag, "prep") == 600 + 7200
    basis = weights.basis(sdag)
    assert len(analyses) == 1 and basis.learned_at is not None and not basis.from_history
    assert _remaining(sdag, "train") == 7200 and weights.basis(sdag) is basis and len(analyses) == 1


@pytest.mark.usefixtures("_fresh_priority_learned")
def test_a_failing_read_keeps_the_declared_estimates(caplog: pytest.LogCaptureFixture) -> None:
    def broken(dag: Any) -> tuple[TaskGraph, int]:
        raise RuntimeError("database is locked")

    learned = LearnedDurations(inline=True, read=broken)
    assert learned.get("wrong:v1", _pipeline()) is None
    assert "cannot learn durations of DAG 'wrong'" in caplog.text


@pytest.mark.usefixtures("_fresh_priority_learned")
def test_kept_by_dag_version_not_by_object(monkeypatch: pytest.MonkeyPatch) -> None:
    """An api-server may load a new object of the same DAG version per request: it is read once."""
    history = FakeHistory(train_s=1200.0)
    _use(monkeypatch, history, inline=True)
    for _ in range(3):
        assert _remaining(_pipeline(), "prep") == 600 + 1200
    assert len(history.threads) == 1


@pytest.mark.usefixtures("_fresh_priority_learned")
def test_the_oldest_versions_are_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    import airflow_gpu_dag.priority.learned as module

    monkeypatch.setattr(module, "MAX_VERSIONS", 3)
    learned = LearnedDurations(inline=True, read=FakeHistory(train_s=1200.0))
    dag = _pipeline()
    for version in ("a", "b", "c", "d"):
        assert learned.get(version, dag) is not None
    assert sorted(learned._entries) == ["b", "c", "d"]


@pytest.mark.usefixtures("_fresh_priority_learned")
def test_mapped_instances_beyond_the_expected_count_are_weighed_like_the_first() -> None:
    from airflow_gpu_dag.priority.basis import node_id

    nodes = {"sweep[0]": 1, "sweep[1]": 1, "select": 1}
    assert node_id(nodes, "sweep", 1) == "sweep[1]"
    assert node_id(nodes, "sweep", 7) == "sweep[0]"
    assert node_id(nodes, "sweep", -1) == "sweep[0]"
    assert node_id(nodes, "select", -1) == "select"
    assert node_id(nodes, "other", 0) is None


@pytest.mark.usefixtures("_fresh_priority_learned")
def test_the_learned_graph_is_analysed_off_the_calling_thread(monkeypatch: pytest.MonkeyPatch) -> None:

    sdag = _pipeline()
    _use(monkeypatch, FakeHistory(train_s=1200.0), inline=False)
    weights = CriticalPathPriorityStrategy._weights
    assert _remaining(sdag, "prep") == 600 + 7200  # declared, analysed on this first call (no policy)
    analysed_in = record_analysis_threads(monkeypatch)
    version = f"wrong:{weights.basis(sdag).version}"
    assert weights.learned is not None and weights.learned.wait_for(version) is not None
    deadline = time.monotonic() + 30
    while _remaining(sdag, "prep") != 600 + 1200 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _remaining(sdag, "prep") == 600 + 1200
    assert analysed_in and set(analysed_in) <= {"gpu-dag-learned", "gpu-dag-weights"}  # never the caller


@pytest.mark.usefixtures("_fresh_priority_learned")
@pytest.mark.parametrize("parsed_by_the_policy", [False, True])
def test_a_new_object_of_a_learned_version_gets_the_learned_weights_at_once(
    monkeypatch: pytest.MonkeyPatch, parsed_by_the_policy: bool
) -> None:
    """An api-server loads a new DAG object per request: its first weights already follow the learned
    durations made for that DAG version (no analysis waited for, none made in the caller)."""
    from airflow_gpu_dag.airflow import parse_time
    from airflow_gpu_dag.airflow.policy import dag_policy

    def pipeline() -> Any:
        with DAG("wrong", default_args={"weight_rule": CRITICAL_PATH_WEIGHT_RULE}) as dag:
            hints = gpu_hints(duration="10m"), gpu_hints(duration="2h")
            prep = BashOperator(task_id="prep", bash_command="true", executor_config=hints[0])
            prep >> BashOperator(task_id="train", bash_command="true", executor_config=hints[1])
        if parsed_by_the_policy:
            dag_policy(dag)
        return DagSerialization.from_dict(DagSerialization.to_dict(dag))

    first = pipeline()
    _use(monkeypatch, FakeHistory(train_s=1200.0), inline=False)
    weights = CriticalPathPriorityStrategy._weights
    _remaining(first, "prep")
    version = f"wrong:{weights.basis(first).version}"
    if parsed_by_the_policy:  # the dag-processor names the version as the weights do
        assert f"wrong:{parse_time.read(first.task_dict['prep']).version}" == version  # type: ignore[union-attr]
    assert weights.learned is not None and weights.learned.wait_for(version) is not None
    second = pipeline()
    assert second is not first
    assert _remaining(second, "prep") == 600 + 1200 and _remaining(second, "train") == 1200


@pytest.mark.usefixtures("_fresh_priority_learned")
def test_policy_text_says_the_packing_plan_hedges_by_the_learned_error() -> None:
    from airflow_gpu_dag.core.model.graph import TaskNode
    from airflow_gpu_dag.core.model.resources import GpuRequest
    from airflow_gpu_dag.core.policy.objective import get_objective
    from airflow_gpu_dag.priority.weights import WeightSettings, policy_text

    def read() -> WeightSettings:
        return WeightSettings(
            get_objective("balanced"), DEFAULT_EPOCH, {"gpu": 8}, "reservation", 0, False, False
        )

    graph = TaskGraph("hedged", priority_rule="packing")
    graph.add_task(
        TaskNode("train", 3600.0, GpuRequest(4), pool="gpu", pool_slots=4, attrs={"learned_error": 0.026})
    )
    assert "off by 2.6% (the learned durations' typical error)" in policy_text(graph, read)
    declared = TaskGraph("declared", priority_rule="packing")
    declared.add_task(TaskNode("train", 3600.0, GpuRequest(4), pool="gpu", pool_slots=4))
    assert "off by" not in policy_text(declared, read)  # no history: planned on the estimates alone
    critical = TaskGraph("cp", priority_rule="critical_path")
    critical.add_task(
        TaskNode("train", 3600.0, GpuRequest(4), pool="gpu", pool_slots=4, attrs={"learned_error": 0.026})
    )
    assert "off by" not in policy_text(critical, read)  # no plan to hedge


@pytest.mark.usefixtures("_fresh_priority_learned")
def test_a_refresh_under_one_second_keeps_one_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    """``[gpu_dag] learned_refresh`` under 1 s: the weights compared the raw setting with the reader's
    refresh bound (raised to 1 s), so every settings re-read (each 30 s) built a new LearnedDurations,
    and the old one's thread re-read every DAG's history each second for the life of the scheduler."""
    from airflow_gpu_dag.core.policy.objective import get_objective
    from airflow_gpu_dag.priority.weights import CrossDagWeights, WeightSettings

    def read() -> WeightSettings:
        return WeightSettings(
            get_objective("balanced"),
            DEFAULT_EPOCH,
            {},
            "reservation",
            0,
            False,
            plan_in_background=True,
            learned=True,
            learned_refresh=0.0,
        )

    weights = CrossDagWeights("critical_path", read_settings=read)
    weights.settings()
    first = weights.learned
    assert first is not None and first.refresh_s == 1.0
    for _ in range(3):
        weights._settings_at -= 31  # the settings' TTL has passed: re-read
        weights.settings()
        assert weights.learned is first
    weights.reset()


@pytest.mark.usefixtures("_fresh_priority_learned")
def test_a_replaced_reader_stops_its_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """New settings (another refresh bound) replace the LearnedDurations: the old one's thread ends."""
    sdag = _pipeline()
    history = FakeHistory(train_s=1200.0)
    _use(monkeypatch, history, inline=False, refresh="1s")
    weights = CriticalPathPriorityStrategy._weights
    before = _live("gpu-dag-learned")
    _remaining(sdag, "prep")  # queues the read: the refresh thread starts
    old = weights.learned
    assert old is not None and _until(lambda: old.running)
    monkeypatch.setenv("AIRFLOW__GPU_DAG__LEARNED_REFRESH", "2s")
    weights._settings_at -= 31
    weights.settings()
    assert weights.learned is not old and weights.learned is not None and weights.learned.refresh_s == 2.0
    assert _until(lambda: not old.running), "the replaced reader's thread still runs"
    reads = len(history.threads)
    time.sleep(1.5)  # longer than the old refresh bound: it reads nothing more
    assert len(history.threads) == reads
    assert _live("gpu-dag-learned") <= before + 1


@pytest.mark.usefixtures("_fresh_priority_learned")
def test_a_stopped_reader_reads_nothing_new() -> None:
    history = FakeHistory(train_s=1200.0)
    learned = LearnedDurations(1.0, read=history)
    assert learned.get("wrong:v1", _pipeline()) is None
    assert learned.wait_for("wrong:v1") is not None and learned.running
    learned.stop()
    assert _until(lambda: not learned.running)
    assert learned.get("wrong:v1", _pipeline()) is not None  # what was read stays readable
    assert learned.get("wrong:v2", _pipeline()) is None and not learned.running
    assert history.threads == ["gpu-dag-learned"]


@pytest.mark.usefixtures("_fresh_priority_learned")
def test_a_replaced_background_ends_its_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """New settings (another planner_nice) replace the background worker: the old thread ends once its
    queued jobs are done."""
    monkeypatch.setenv("AIRFLOW__GPU_DAG__PLAN_IN_BACKGROUND", "true")
    weights = CriticalPathPriorityStrategy._weights
    weights.reset()
    weights.settings()
    old = weights.background
    assert old is not None and not old.inline
    done: list[str] = []
    old.run("job", lambda: done.append(threading.current_thread().name))
    assert old.wait_idle(10) and old.running
    monkeypatch.setenv("AIRFLOW__GPU_DAG__PLANNER_NICE", "5")
    weights._settings_at -= 31
    weights.settings()
    assert weights.background is not old and weights.background is not None and weights.background.nice == 5
    assert _until(lambda: not old.running), "the replaced worker still runs"
    assert done == ["gpu-dag-weights"]


@pytest.mark.usefixtures("_fresh_priority_learned")
def test_superseded_versions_of_a_dag_are_not_refreshed() -> None:
    """A re-versioned DAG: its superseded versions kept being re-read every refresh bound (up to 1,024
    versions, each a history query and a graph build in the scheduler's process) though nothing asked for
    them. A version is refreshed while in use: its DAG's newest, or asked for since the newest appeared
    (older runs still expanding mapped tasks); the others stay readable."""
    now = [0.0]
    learned = LearnedDurations(
        refresh_s=60.0, inline=True, read=FakeHistory(train_s=1200.0), clock=lambda: now[0]
    )
    dag = _pipeline()

    def due() -> list[str]:
        return sorted(version for version, _ in learned._due())

    for version in ("wrong:v1", "other:v1", "wrong:v2"):
        assert learned.get(version, dag) is not None
    assert due() == []
    now[0] = 61.0
    assert due() == ["other:v1", "wrong:v2"]  # wrong:v1 superseded
    assert learned._entries["wrong:v1"].at == 0.0  # and still readable
    learned.get("wrong:v1", dag)  # a run of v1 still weighs tasks: in use again (read inline here)
    now[0] = 200.0
    assert due() == ["other:v1", "wrong:v1", "wrong:v2"]  # v2, the newest, stays in use too
    learned.get("wrong:v3", dag)
    now[0] = 400.0
    assert due() == ["other:v1", "wrong:v3"]


@pytest.mark.usefixtures("_fresh_weights")
def test_a_refresh_bound_of_years_still_reads_the_learned_durations() -> None:
    """``[gpu_dag] learned_refresh = "1000000d"`` (never refresh, in effect) is accepted, and the refresh
    thread still reads: a quarter of it is longer than a wait may take (``threading.TIMEOUT_MAX``), and
    waiting that long would kill the thread with OverflowError before it reads anything, once per new
    DAG version."""
    reads: list[str] = []

    def read(dag: Any) -> tuple[None, int]:
        reads.append(dag)
        return None, 0

    learned = LearnedDurations(refresh_s=86_400_000_000.0, read=read)
    try:
        assert learned.get("audit:v1", "dag") is None  # queued for the thread
        assert learned.wait_for("audit:v1", timeout=20) is not None
        assert reads == ["dag"] and learned.running
    finally:
        learned.stop()


# -- more: the refresh bound, inline reads, the reading thread, read_learned --------------------------


def test_refresh_bound_is_at_least_the_minimum() -> None:
    from airflow_gpu_dag.priority.learned import MIN_REFRESH_S, refresh_bound

    assert refresh_bound(0.2) == MIN_REFRESH_S == 1.0
    assert refresh_bound(-600.0) == MIN_REFRESH_S
    assert refresh_bound(float("nan")) == MIN_REFRESH_S  # not a NaN bound that no age ever reaches
    assert refresh_bound(600.0) == 600.0
    assert LearnedDurations(0.0).refresh_s == MIN_REFRESH_S


@pytest.mark.parametrize(
    ("graph", "learned_tasks", "nothing"),
    [(None, 0, True), (None, 3, True), (TaskGraph("g"), 0, True), (TaskGraph("g"), 1, False)],
)
def test_a_learned_entry_changes_nothing_without_a_graph_or_learned_tasks(
    graph: TaskGraph | None, learned_tasks: int, nothing: bool
) -> None:
    from airflow_gpu_dag.priority.learned import Learned

    assert Learned(0.0, graph, learned_tasks).changes_nothing is nothing


def test_inline_reads_are_kept_until_the_refresh_bound_then_read_again() -> None:
    now = [0.0]
    history = FakeHistory(train_s=1200.0)
    learned = LearnedDurations(refresh_s=60.0, inline=True, read=history, clock=lambda: now[0])
    dag = _pipeline()
    first = learned.get("wrong:v1", dag)
    assert first is not None and first.at == 0.0 and learned.reads == 1
    now[0] = 60.0  # as old as the bound: still fresh inline
    assert learned.get("wrong:v1", dag) is first and learned.reads == 1
    now[0] = 60.5
    again = learned.get("wrong:v1", dag)
    assert again is not None and again.at == 60.5 and learned.reads == 2
    assert not learned.running  # inline: no thread


def test_the_least_recently_asked_version_is_dropped_first(monkeypatch: pytest.MonkeyPatch) -> None:
    import airflow_gpu_dag.priority.learned as module

    monkeypatch.setattr(module, "MAX_VERSIONS", 2)
    learned = LearnedDurations(inline=True, read=FakeHistory(train_s=1200.0))
    dag = _pipeline()
    for version in ("wrong:a", "wrong:b", "wrong:a", "wrong:c"):
        learned.get(version, dag)
    assert sorted(learned._entries) == ["wrong:a", "wrong:c"]
    assert sorted(learned._dags) == ["wrong:a", "wrong:c"] == sorted(learned._first) == sorted(learned._last)


def test_a_version_is_due_again_exactly_at_the_refresh_bound() -> None:
    now = [0.0]
    learned = LearnedDurations(
        refresh_s=60.0, inline=True, read=FakeHistory(train_s=1200.0), clock=lambda: now[0]
    )
    learned.get("wrong:v1", _pipeline())
    now[0] = 59.9
    assert learned._due() == []
    now[0] = 60.0
    assert [version for version, _ in learned._due()] == ["wrong:v1"]


def test_prepare_runs_before_the_entry_is_visible_and_a_failing_prepare_keeps_the_entry(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Callers that find the entry also find what ``prepare`` made; a failure there loses no read."""
    seen: list[bool] = []
    learned: LearnedDurations

    def prepare(version: str, dag: Any, entry: Any) -> None:
        seen.append(version in learned._entries)
        raise RuntimeError("cannot analyse")

    learned = LearnedDurations(inline=True, read=FakeHistory(train_s=1200.0), prepare=prepare)
    entry = learned.get("wrong:v1", _pipeline())
    assert entry is not None and learned._entries["wrong:v1"] is entry
    assert seen == [False]
    assert "preparing the weights of DAG version wrong:v1 failed" in caplog.text


def test_concurrent_asks_for_a_new_version_read_it_once() -> None:
    """The scheduler's and the api-server's threads ask for one new version at once: one read."""
    release = threading.Event()
    reads: list[str] = []

    def slow(dag: Any) -> tuple[None, int]:
        reads.append(dag)
        release.wait(timeout=10)
        return None, 0

    learned = LearnedDurations(read=slow)
    barrier = threading.Barrier(6)
    got: list[Any] = []

    def ask() -> None:
        barrier.wait(timeout=10)
        got.append(learned.get("wrong:v1", "dag"))

    threads = [threading.Thread(target=ask) for _ in range(6)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=10)
        assert got == [None] * 6  # none waits for the read
        release.set()
        assert learned.wait_for("wrong:v1", timeout=10) is not None
        assert learned.get("wrong:v1", "dag") is not None and reads == ["dag"]
    finally:
        release.set()
        learned.stop()


def test_a_failing_read_in_the_thread_keeps_it_reading_other_versions() -> None:
    def read(dag: Any) -> tuple[None, int]:
        if dag == "broken":
            raise RuntimeError("database is locked")
        return None, 0

    learned = LearnedDurations(read=read)
    try:
        assert learned.get("broken:v1", "broken") is None
        assert learned.get("fine:v1", "fine") is None
        assert learned.wait_for("fine:v1", timeout=10) is not None
        assert learned.running and learned.get("broken:v1", "broken") is None
    finally:
        learned.stop()


def test_wait_for_a_version_never_asked_for_gives_up_at_its_timeout() -> None:
    learned = LearnedDurations(inline=True, read=FakeHistory(train_s=1200.0))
    assert learned.wait_for("wrong:v9", timeout=0.05) is None


def test_a_stopped_inline_reader_reads_nothing_new() -> None:
    """``stop``: "entries already read stay readable; new versions are no longer read"."""
    history = FakeHistory(train_s=1200.0)
    learned = LearnedDurations(inline=True, read=history)
    assert learned.get("wrong:v1", _pipeline()) is not None
    learned.stop()
    assert learned.get("wrong:v1", _pipeline()) is not None
    assert learned.get("wrong:v2", _pipeline()) is None and len(history.threads) == 1


class _Session:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def rollback(self) -> None:
        self.calls.append("rollback")

    def close(self) -> None:
        self.calls.append("close")


def _learned_graph(map_counts: dict[str, int], *learned: float | None) -> Any:
    estimates = {f"t{i}": SimpleNamespace(learned=value) for i, value in enumerate(learned)}
    return SimpleNamespace(graph=TaskGraph("wrong"), estimates=estimates, map_counts=map_counts)


def test_read_learned_counts_learned_durations_and_map_counts_in_its_own_session(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import airflow_gpu_dag.airflow.history as history_module
    import airflow_gpu_dag.priority.learned as module

    session = _Session()
    monkeypatch.setattr(module.airflow_settings, "NonScopedSession", lambda: session)
    sessions: list[Any] = []
    monkeypatch.setattr(
        history_module, "has_history", lambda dag_id, session=None: sessions.append(session) or 1
    )
    learned = _learned_graph({"sweep": 4}, 600.0, None, 30.0)
    monkeypatch.setattr(
        history_module,
        "learned_task_graph",
        lambda dag, expand_mapped, session: sessions.append(session) or learned,
    )
    assert module.read_learned(SimpleNamespace(dag_id="wrong")) == (learned.graph, 3)
    assert sessions == [session, session] and session.calls == ["close"]  # read only: nothing committed


def test_read_learned_rolls_back_a_failed_history_check_and_still_reads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A failed LIMIT 1 query aborts the transaction: rolled back, so the learned graph's query can run."""
    import airflow_gpu_dag.airflow.history as history_module
    import airflow_gpu_dag.priority.learned as module

    session = _Session()
    monkeypatch.setattr(module.airflow_settings, "NonScopedSession", lambda: session)

    def failing(dag_id: str, session: Any = None) -> bool:
        raise RuntimeError("relation task_instance does not exist")

    def read(dag: Any, expand_mapped: bool, session: Any) -> Any:
        session.calls.append("read")
        return _learned_graph({})

    monkeypatch.setattr(history_module, "has_history", failing)
    monkeypatch.setattr(history_module, "learned_task_graph", read)
    _graph, learned_tasks = module.read_learned(SimpleNamespace(dag_id="wrong"))
    assert learned_tasks == 0 and session.calls == ["rollback", "read", "close"]


@pytest.mark.parametrize("maker", [None, "raises"])
def test_no_own_session_when_none_can_be_made(monkeypatch: pytest.MonkeyPatch, maker: Any) -> None:
    import airflow_gpu_dag.priority.learned as module

    def broken() -> Any:
        raise RuntimeError("not configured")

    monkeypatch.setattr(module.airflow_settings, "NonScopedSession", broken if maker else None)
    assert module._own_session() is None
