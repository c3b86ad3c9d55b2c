"""Tests of ``airflow_gpu_dag.kubernetes.kueue``."""

from __future__ import annotations

import pytest

from airflow_gpu_dag.kubernetes.kueue import (
    POD_GROUP_LABEL,
    POD_GROUP_TOTAL_COUNT_ANNOTATION,
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
