"""Kubernetes label syntax: what a label value, or the name part of a label key, may be.

At most 63 characters of ``[A-Za-z0-9-_.]``, starting and ending with a letter or digit. Checked where
a task is declared (dataset labels, GPU product values, Kueue queue and priority-class labels), so a
value the API server would refuse fails the DAG file, naming the task, instead of every pod it starts.
"""

from __future__ import annotations

import re

__all__ = ["LABEL_MAX_LENGTH", "is_label_value"]

#: The longest label value (and label-key name part) Kubernetes accepts.
LABEL_MAX_LENGTH = 63

# ``\Z``, not ``$``: ``$`` also matches before a final newline, which the API server refuses
_LABEL = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?\Z")


def is_label_value(value: object) -> bool:
    """Whether ``value`` is a non-empty label value (or label-key name part) Kubernetes accepts."""
    return isinstance(value, str) and len(value) <= LABEL_MAX_LENGTH and _LABEL.match(value) is not None
