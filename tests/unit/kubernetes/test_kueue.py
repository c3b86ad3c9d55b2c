"""Tests of ``airflow_gpu_dag.kubernetes.kueue``."""

from __future__ import annotations

import pytest

from airflow_gpu_dag.kubernetes.kueue import (
    POD_GROUP_LABEL,
    POD_GROUP_TOTAL_COUNT_ANNOTATION,
    PRIORITY_CLASS_LABEL,
    QUEUE_LABEL,
    KueueError,
    kueue_pod_metadata,
)


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


def test_a_queue_alone_gives_the_queue_label_and_no_annotations() -> None:
    assert kueue_pod_metadata("team-a") == ({QUEUE_LABEL: "team-a"}, {})


def test_the_workload_priority_class_is_a_label() -> None:
    labels, annotations = kueue_pod_metadata("q", workload_priority_class="high-priority")
    assert labels == {QUEUE_LABEL: "q", PRIORITY_CLASS_LABEL: "high-priority"}
    assert annotations == {}


def test_all_metadata_together() -> None:
    labels, annotations = kueue_pod_metadata(
        "q", pod_group="run-1", pod_group_size=8, workload_priority_class="p.1"
    )
    assert labels == {QUEUE_LABEL: "q", POD_GROUP_LABEL: "run-1", PRIORITY_CLASS_LABEL: "p.1"}
    assert annotations == {POD_GROUP_TOTAL_COUNT_ANNOTATION: "8"}


@pytest.mark.parametrize("value", ["a", "a" * 63, "A.b_c-9", "0"])
def test_label_values_up_to_63_characters_are_accepted(value: str) -> None:
    labels, _ = kueue_pod_metadata(value, pod_group=value, pod_group_size=1, workload_priority_class=value)
    assert set(labels.values()) == {value}


@pytest.mark.parametrize(
    "value", ["a" * 64, "-q", "q-", "q.", "équipe", "team/a", "q\n", " q", "q q", "日本"]
)
@pytest.mark.parametrize(
    ("what", "call"),
    [
        ("Kueue queue name", lambda v: kueue_pod_metadata(v)),
        ("Kueue pod group", lambda v: kueue_pod_metadata("q", pod_group=v, pod_group_size=2)),
        ("Kueue workload priority class", lambda v: kueue_pod_metadata("q", workload_priority_class=v)),
    ],
)
def test_a_value_that_is_no_label_value_is_refused_naming_the_field_and_the_syntax(
    value: str, what: str, call
) -> None:
    with pytest.raises(KueueError, match=rf"^{what} .* must be a label value: at most 63 characters"):
        call(value)


@pytest.mark.parametrize("queue", [None, 5, b"team-a", ["team-a"]])
def test_a_queue_name_that_is_no_string_is_refused(queue: object) -> None:
    with pytest.raises(KueueError, match="Kueue queue name"):
        kueue_pod_metadata(queue)  # type: ignore[arg-type]


@pytest.mark.parametrize("size", [None, 0, -1, True, 2.0, "3"])
def test_a_pod_group_needs_a_whole_positive_size(size: object) -> None:
    with pytest.raises(KueueError, match=r"Kueue pod group 'g' needs pod_group_size >= 1"):
        kueue_pod_metadata("q", pod_group="g", pod_group_size=size)  # type: ignore[arg-type]


def test_a_huge_pod_group_size_is_written_in_full() -> None:
    _, annotations = kueue_pod_metadata("q", pod_group="g", pod_group_size=10**20)
    assert annotations == {POD_GROUP_TOTAL_COUNT_ANNOTATION: "100000000000000000000"}


def test_kueue_error_is_a_value_error() -> None:
    """Parse-time checks catch ``ValueError``; the operator re-raises it naming the task."""
    assert issubclass(KueueError, ValueError)


def test_an_empty_priority_class_adds_no_label() -> None:
    assert kueue_pod_metadata("q", workload_priority_class="") == ({QUEUE_LABEL: "q"}, {})


def test_a_pod_group_size_without_a_pod_group_is_refused() -> None:
    """The operator refuses ``kueue_pod_group_size`` without ``kueue_pod_group``; called directly,
    ``kueue_pod_metadata("q", pod_group_size=4)`` returns no pod group and no error."""
    with pytest.raises(KueueError, match="pod_group"):
        kueue_pod_metadata("q", pod_group_size=4)
