"""Pools: which pool a task holds slots of, how many, and GPU pool naming (one pool per GPU type).

A GPU task takes ``pool_slots = GPUs`` slots of its pool, so a pool's size is the number of GPUs it
stands for. Tasks that accept any GPU use :data:`DEFAULT_GPU_POOL` (``gpu_default``); tasks that need a
type use ``gpu_<type>`` (``gpu_a100``, ``gpu_h100``). The pool can always be overridden per task.

    >>> pool_for_gpu_type(None)
    'gpu_default'
    >>> pool_for_gpu_type("A100")
    'gpu_a100'
    >>> gpu_type_of_pool("gpu_h100")
    'h100'
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

__all__ = [
    "DEFAULT_GPU_POOL",
    "DEFAULT_POOL",
    "GPU_POOL_PREFIX",
    "MAX_POOL_NAME_LENGTH",
    "gpu_type_of_pool",
    "is_gpu_pool",
    "normalize_gpu_type",
    "pool_for_gpu_type",
    "pool_name_problem",
    "pool_sizes_for_devices",
    "respelled_gpu_type",
]

#: Airflow's pool for tasks that name none (``airflow.sdk.bases.operator.DEFAULT_POOL_NAME``).
DEFAULT_POOL = "default_pool"
#: Prefix of every GPU pool this provider names.
GPU_POOL_PREFIX = "gpu_"
#: Pool of GPU tasks that accept any GPU type.
DEFAULT_GPU_POOL = "gpu_default"

#: The longest pool name Airflow stores (``airflow.models.pool.Pool.pool`` and the task instance's
#: ``pool`` are ``String(256)``): a longer one fails when the pool is created or a task is queued.
MAX_POOL_NAME_LENGTH = 256

_NON_NAME = re.compile(r"[^a-z0-9]+")


def normalize_gpu_type(gpu_type: str) -> str:
    """Canonical spelling of a GPU type for pool names and comparisons: lower case, ``[a-z0-9_]``.

    ``"A100"`` -> ``"a100"``, ``"RTX 4090"`` -> ``"rtx_4090"``: every run of characters other than
    letters and digits becomes one ``_`` (so ``"a 100"``, ``"a-100"`` and ``"a_100"`` name one type,
    and ``"a100"`` another; :func:`respelled_gpu_type` says when a spelling was changed so).

    :raises ValueError: no letters or digits; or characters that are not ASCII (``"ä100"`` and
        a full-width ``"A100"`` would both lose their letter and become ``100``): the message gives the ASCII
        spelling.
    """
    raw = str(gpu_type)
    if not raw.isascii():
        odd = "".join(dict.fromkeys(c for c in raw if not c.isascii()))
        spelled = _NON_NAME.sub("_", _ascii_form(raw).strip().lower()).strip("_")
        # a letter or digit with no ASCII form ('ß', 'ø') would be dropped: no spelling to offer then
        lost = [c for c in odd if c.isalnum() and not any(a.isalnum() for a in _ascii_form(c))]
        fix = (
            f"write {spelled!r}"
            if spelled and not lost
            else f"write it in ASCII letters and digits, e.g. 'a100' ({''.join(lost)!r} has no ASCII form)"
            if lost
            else "write it in ASCII letters and digits, e.g. 'a100'"
        )
        raise ValueError(
            f"GPU type {raw!r} has characters that are not ASCII ({odd!r}); pool names and the workers' "
            f"GPU types are ASCII. Fix: {fix}"
        )
    text = _NON_NAME.sub("_", raw.strip().lower()).strip("_")
    if not text:
        raise ValueError(f"GPU type {gpu_type!r} has no letters or digits; use a name such as 'a100'")
    return text


def respelled_gpu_type(gpu_type: str) -> str | None:
    """What a GPU type spelling is read as, when that is more than a change of case: ``"a-100"`` ->
    ``"a_100"``; None for a canonical spelling (``"a100"``, ``"A100"``, ``"rtx_4090"``) or one that
    :func:`normalize_gpu_type` refuses.

    Separators other than one ``_`` are accepted (``"RTX 4090"``, as NVML names GPUs), but the
    spellings that become one pool are not obvious: ``"a-100"`` is ``gpu_a_100``, not ``gpu_a100``.
    The provider therefore warns with the canonical spelling wherever a task declares such a type."""
    try:
        canonical = normalize_gpu_type(gpu_type)
    except ValueError:
        return None
    return None if canonical == str(gpu_type).strip().lower() else canonical


def pool_name_problem(pool: str) -> str | None:
    """What Airflow cannot store about pool name ``pool`` (longer than :data:`MAX_POOL_NAME_LENGTH`),
    or None."""
    if len(pool) > MAX_POOL_NAME_LENGTH:
        return (
            f"pool name {pool[:40] + '...'!r} has {len(pool)} characters; Airflow stores at most "
            f"{MAX_POOL_NAME_LENGTH} (its pool name column)"
        )
    return None


def pool_for_gpu_type(gpu_type: str | None) -> str:
    """The pool for tasks needing ``gpu_type`` (``gpu_<type>``), or ``gpu_default`` for any GPU."""
    if gpu_type is None or not str(gpu_type).strip():
        return DEFAULT_GPU_POOL
    return GPU_POOL_PREFIX + normalize_gpu_type(gpu_type)


def is_gpu_pool(pool: str | None) -> bool:
    """True for a pool named by this provider (``gpu_default`` or ``gpu_<type>``)."""
    return bool(pool) and str(pool).startswith(GPU_POOL_PREFIX) and len(str(pool)) > len(GPU_POOL_PREFIX)


def gpu_type_of_pool(pool: str) -> str | None:
    """The GPU type a pool stands for (None for ``gpu_default`` or a pool not named by this provider)."""
    if not is_gpu_pool(pool) or pool == DEFAULT_GPU_POOL:
        return None
    return pool[len(GPU_POOL_PREFIX) :]


def _ascii_form(text: str) -> str:
    """The ASCII characters of ``text`` decomposed (NFKD): a full-width ``A`` is ``A``, ``'ä'`` is
    ``'a'``, ``'ß'`` is nothing."""
    return "".join(c for c in unicodedata.normalize("NFKD", text) if c.isascii())


def pool_sizes_for_devices(gpu_types: Iterable[str]) -> dict[str, int]:
    """Full pool sizes for a host with devices of ``gpu_types`` (one entry per device).

    ``gpu_default`` holds every device, ``gpu_<type>`` the devices of that type:
    ``["a100", "a100", "v100"]`` -> ``{"gpu_default": 3, "gpu_a100": 2, "gpu_v100": 1}``.
    """
    sizes: dict[str, int] = {DEFAULT_GPU_POOL: 0}
    for gpu_type in gpu_types:
        sizes[DEFAULT_GPU_POOL] += 1
        pool = pool_for_gpu_type(gpu_type)
        if pool != DEFAULT_GPU_POOL:  # a type named "default" is that pool already: counted once
            sizes[pool] = sizes.get(pool, 0) + 1
    return sizes
