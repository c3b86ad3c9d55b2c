"""The errors of the GPU lease manager (gpu/lease_errors.py): one base to catch them all, one class per
reason a lease fails, importable from the lease manager's module too."""

from __future__ import annotations

import pytest

from airflow_gpu_dag.gpu import lease, lease_errors
from airflow_gpu_dag.gpu.lease_errors import (
    LeaseError,
    LeaseImpossible,
    LeaseLost,
    LeaseTableCorrupt,
    LeaseTimeout,
)

REASONS = [LeaseImpossible, LeaseTimeout, LeaseLost, LeaseTableCorrupt]


@pytest.mark.parametrize("cls", REASONS, ids=[c.__name__ for c in REASONS])
def test_each_reason_is_caught_as_a_lease_error_with_its_message(cls: type[LeaseError]) -> None:
    """A caller that only cares that the lease failed catches :class:`LeaseError` (a RuntimeError)."""
    with pytest.raises(LeaseError, match=r"^3 GPUs of type h100 requested, 2 on this host$") as err:
        raise cls("3 GPUs of type h100 requested, 2 on this host")
    assert type(err.value) is cls
    assert isinstance(err.value, RuntimeError)


def test_the_reasons_are_distinct() -> None:
    """A wait that timed out is retried, an impossible request is not: no reason is caught as another."""
    for cls in REASONS:
        assert [other for other in REASONS if issubclass(cls, other)] == [cls]
    assert LeaseError.__mro__[1] is RuntimeError


def test_the_lease_module_re_exports_every_error() -> None:
    """``gpu.lease``: "Everything public is importable from here"."""
    assert set(lease_errors.__all__) == {"LeaseError", *(c.__name__ for c in REASONS)}
    for name in lease_errors.__all__:
        assert getattr(lease, name) is getattr(lease_errors, name)
        assert name in lease.__all__
