"""Kubernetes label syntax (kubernetes/labels.py): the one check the pod spec and Kueue metadata use."""

from __future__ import annotations

import pytest

from airflow_gpu_dag.kubernetes.labels import LABEL_MAX_LENGTH, is_label_value


@pytest.mark.parametrize("value", ["a", "c4-en", "imagenet_2012", "NVIDIA-A100-SXM4-80GB", "v1.2", "x" * 63])
def test_a_label_value_kubernetes_accepts_is_one(value: str) -> None:
    assert is_label_value(value)


@pytest.mark.parametrize(
    "value",
    ["", "x" * 64, "-a", "a-", ".a", "a b", "a/b", "über", "c4\n", "\nc4", None, 5, ("c4",)],
)
def test_what_the_api_server_refuses_is_no_label_value(value: object) -> None:
    """Empty, over 63 characters, not alphanumeric at both ends, other characters, a trailing newline
    (``$`` would let it through), or not a string."""
    assert not is_label_value(value)


def test_the_longest_label_value_is_63_characters() -> None:
    assert LABEL_MAX_LENGTH == 63
