"""Is a dataset complete, not merely present?

Pure checks over any fsspec filesystem (local paths, ``file://``, ``memory://``, ``s3://``, ...) or
an Airflow ``ObjectStoragePath``. Three rules:

- :class:`Marker`: the producer writes a marker file (``_SUCCESS``) last; the dataset is complete
  when the marker exists.
- :class:`Manifest`: the producer writes a manifest (``_MANIFEST.json``) listing every file with its
  size (and optionally ``sha256``/``md5``); complete when every listed file exists with that size
  and checksum.
- :class:`StableSize`: complete when the directory is non-empty and no file's size changed for
  ``period`` seconds (for producers that write neither). Needs several observations:
  :class:`StabilityTracker` keeps them.

Producers can call :func:`write_marker` and :func:`write_manifest` when they finish.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import fsspec.core
from airflow.sdk import ObjectStoragePath

__all__ = [
    "CheckStopped",
    "CompletenessResult",
    "CompletenessRule",
    "Manifest",
    "Marker",
    "StabilityTracker",
    "StableSize",
    "check_failed",
    "check_once",
    "parse_completeness",
    "permanent_error",
    "resolve",
    "snapshot",
    "storage_url",
    "write_manifest",
    "write_marker",
]

#: Names accepted by :func:`parse_completeness`.
RULE_NAMES = ("marker", "manifest", "stable")


@dataclass(frozen=True)
class CompletenessResult:
    """The outcome of one check: ``complete`` plus a human-readable ``reason`` (what is missing)."""

    complete: bool
    reason: str
    files: int = 0
    bytes: int = 0


@dataclass(frozen=True)
class Marker:
    """Complete when ``<dataset>/<name>`` exists."""

    name: str = "_SUCCESS"
    kind: str = field(default="marker", init=False)

    def __post_init__(self) -> None:
        _check_name(self)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "marker", "name": self.name}


@dataclass(frozen=True)
class Manifest:
    """Complete when every file listed in ``<dataset>/<name>`` exists with its size/checksum.

    Manifest format: ``{"files": [{"path": "part-0.parquet", "size": 1234, "sha256": "..."}]}``;
    ``path`` is relative to the dataset directory; ``size``, ``sha256`` and ``md5`` are optional.
    """

    name: str = "_MANIFEST.json"
    verify_checksums: bool = True
    kind: str = field(default="manifest", init=False)

    def __post_init__(self) -> None:
        _check_name(self)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "manifest", "name": self.name, "verify_checksums": self.verify_checksums}


@dataclass(frozen=True)
class StableSize:
    """Complete when the dataset is non-empty and its file sizes have not changed for ``period`` s.

    Not complete while it holds only empty files, or a temporary one (a ``_temporary/`` folder, a
    ``.part`` or ``.tmp`` file: a writer renames those into place when it is done)."""

    period: float = 60.0
    kind: str = field(default="stable", init=False)

    def __post_init__(self) -> None:
        period = self.period
        if isinstance(period, bool) or not isinstance(period, (int, float)) or not 0 < period < math.inf:
            raise ValueError(
                f"StableSize(period={self.period!r}): the period must be a positive number of seconds "
                "(finite)."
            )

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "stable", "period": float(self.period)}


CompletenessRule = Marker | Manifest | StableSize


def _check_name(rule: Marker | Manifest) -> None:
    """A marker or manifest needs a file name: an empty one names the dataset directory itself, which
    exists as soon as the first file does (a marker rule would call the dataset complete)."""
    if not isinstance(rule.name, str) or not rule.name.strip().strip("/"):
        kind = type(rule).__name__
        raise ValueError(
            f"{kind}(name={rule.name!r}): the {kind.lower()} needs a file name inside the dataset, "
            f"e.g. {kind}({type(rule)().name!r})."
        )


def parse_completeness(spec: object) -> CompletenessRule:
    """A rule from a rule object, a name (``"marker"``, ``"manifest"``, ``"stable"``) or a dict
    made by ``to_dict()``.

    :raises ValueError: unknown rule, with the accepted names.
    """
    if isinstance(spec, (Marker, Manifest, StableSize)):
        return spec
    original = spec
    if isinstance(spec, str):
        spec = {"kind": spec.strip().lower()}
    if isinstance(spec, Mapping):
        kind = spec.get("kind")
        if kind == "marker":
            return Marker(str(spec.get("name", "_SUCCESS")))
        if kind == "manifest":
            return Manifest(str(spec.get("name", "_MANIFEST.json")), bool(spec.get("verify_checksums", True)))
        if kind == "stable":
            return StableSize(float(spec.get("period", 60.0)))
    raise ValueError(
        f"unknown completeness rule {original!r}; use one of {', '.join(RULE_NAMES)} "
        "or Marker(...), Manifest(...), StableSize(period=...)."
    )


def resolve(path: Any, conn_id: str | None = None) -> tuple[Any, str]:
    """``(filesystem, path inside it)`` for a local path, a URL or an ``ObjectStoragePath``."""
    fs = getattr(path, "fs", None)
    if fs is not None and hasattr(path, "path"):  # ObjectStoragePath / UPath
        return fs, str(path.path)
    text = os.fspath(path) if isinstance(path, os.PathLike) else str(path)
    if conn_id:
        osp = ObjectStoragePath(text, conn_id=conn_id)
        return osp.fs, str(osp.path)
    fs, inner = fsspec.core.url_to_fs(text)
    return fs, str(inner)


def storage_url(path: Any) -> tuple[str, str | None]:
    """``(url, conn_id)`` of a path as a sensor stores it: an ``ObjectStoragePath`` gives
    ``protocol://path`` and its own connection id (``str()`` of one with a connection puts the id into
    the URL, ``s3://conn@bucket/key``, which no filesystem reads back); anything else its string and
    None."""
    conn_id = getattr(path, "conn_id", None)
    protocol = getattr(path, "protocol", None)
    inner = getattr(path, "path", None)
    if conn_id and isinstance(inner, str) and isinstance(protocol, str):
        url = f"{protocol}://{inner}" if protocol else inner
        return url, str(conn_id)
    return (os.fspath(path) if isinstance(path, os.PathLike) else str(path)), None


def check_failed(err: BaseException) -> str:
    """The reason a check that raised ``err`` gives (worth checking again: see :func:`permanent_error`),
    the same in the worker and the triggerer."""
    return f"check failed: {type(err).__name__}: {err}"


def permanent_error(err: BaseException) -> str | None:
    """What to fix when ``err`` (raised by a check) cannot go away by checking again: a missing
    package (``ImportError``, e.g. ``Install s3fs to access S3``), a connection that is not defined
    (Airflow's ``AirflowNotFoundException``), or no filesystem for the path's scheme. None for
    anything else (a flaky object store, a timeout): worth checking again."""
    what = f"{type(err).__name__}: {err}"
    if isinstance(err, ImportError):
        return (
            f"{what}. Fix: install the package for this storage (the Airflow provider of the scheme, "
            "e.g. apache-airflow-providers-amazon, or the fsspec implementation, e.g. s3fs) where "
            "the check runs: the workers and the triggerer"
        )
    if any(cls.__name__ == "AirflowNotFoundException" for cls in type(err).__mro__):
        return (
            f"{what}. Fix: define the connection where the workers and the triggerer can read it "
            "(airflow connections add, AIRFLOW_CONN_<ID>, or a secrets backend), or pass the right conn_id="
        )
    text = str(err)
    if isinstance(err, ValueError) and (
        text.startswith("No filesystem registered for scheme") or text.startswith("Protocol not known")
    ):
        return (
            f"{what}. Fix: install the Airflow provider (or fsspec implementation) for this scheme "
            "on the workers and the triggerer, or check the path's scheme"
        )
    return None


def _join(base: str, rel: str) -> str:
    return base.rstrip("/") + "/" + rel.lstrip("/")


def snapshot(fs: Any, path: str) -> dict[str, int]:
    """Relative file path -> size for every file under ``path`` (empty when it does not exist)."""
    if not fs.exists(path):
        return {}
    if fs.isfile(path):
        info = fs.info(path)
        return {os.path.basename(path.rstrip("/")): int(info.get("size") or 0)}
    found = fs.find(path, detail=True)
    base = path.rstrip("/") + "/"
    result: dict[str, int] = {}
    for name, info in found.items():
        if info.get("type") == "directory":
            continue
        rel = name[len(base) :] if name.startswith(base) else name.lstrip("/")
        if not rel and name.rstrip("/") == path.rstrip("/"):
            rel = os.path.basename(name)
        result[rel] = int(info.get("size") or 0)
    return result


def check_marker(fs: Any, path: str, rule: Marker) -> CompletenessResult:
    marker = _join(path, rule.name)
    if fs.exists(marker):
        return CompletenessResult(True, f"marker {rule.name} present")
    if not fs.exists(path):
        return CompletenessResult(False, f"dataset {path} does not exist yet")
    return CompletenessResult(False, f"marker {rule.name} missing in {path} (dataset still being written?)")


class CheckStopped(Exception):
    """A check was told to stop (its trigger was cancelled): see ``stop=`` of :func:`check_once`."""


def _digest(fs: Any, path: str, algorithm: str, stop: threading.Event | None = None) -> str:
    h = hashlib.new(algorithm)
    with fs.open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            if stop is not None and stop.is_set():  # a cancelled trigger's thread stops reading
                raise CheckStopped(f"check of {path} stopped")
            h.update(chunk)
    return h.hexdigest()


def check_manifest(
    fs: Any, path: str, rule: Manifest, stop: threading.Event | None = None
) -> CompletenessResult:
    manifest_path = _join(path, rule.name)
    if not fs.exists(manifest_path):
        return CompletenessResult(False, f"manifest {rule.name} missing in {path}")
    try:
        with fs.open(manifest_path, "rb") as handle:
            data = json.loads(handle.read().decode("utf-8"))
        entries = data["files"]
        if not isinstance(entries, list):
            raise TypeError("'files' is not a list")
        listed = [_manifest_entry(number, entry) for number, entry in enumerate(entries, 1)]
    except (ValueError, KeyError, TypeError) as err:
        return CompletenessResult(False, f"manifest {manifest_path} is unreadable ({err})")
    if not entries:
        # The "manifest of nothing" write_manifest refuses to write: a handwritten one proves no file.
        return CompletenessResult(False, f"manifest {manifest_path} lists no files")
    total = 0
    for entry, rel in zip(entries, listed, strict=True):
        target = _join(path, rel)
        if not fs.exists(target):
            return CompletenessResult(False, f"{rel} listed in {rule.name} is missing")
        info = fs.info(target)
        if info.get("type") == "directory":
            return CompletenessResult(False, f"{rel} listed in {rule.name} is a directory, not a file")
        size = int(info.get("size") or 0)
        total += size
        if isinstance(entry, Mapping) and entry.get("size") is not None and int(entry["size"]) != size:
            return CompletenessResult(
                False,
                f"{rel} has {size} bytes, {rule.name} lists {int(entry['size'])} (still being written?)",
            )
    # Checksums last, once every file is there with its size: a wait re-checks every poke, and reading
    # the files already written while the rest are missing would read the dataset again each time.
    for entry, rel in zip(entries, listed, strict=True):
        if not rule.verify_checksums or not isinstance(entry, Mapping):
            continue
        for algorithm in ("sha256", "md5"):
            expected = entry.get(algorithm)
            if expected and _digest(fs, _join(path, rel), algorithm, stop) != str(expected).lower():
                return CompletenessResult(False, f"{rel} {algorithm} does not match {rule.name}")
    return CompletenessResult(True, f"all {len(entries)} files of {rule.name} present", len(entries), total)


def _manifest_entry(number: int, entry: Any) -> str:
    """The relative path of manifest entry ``number`` (a path, or an object with ``path`` and maybe
    an integer ``size``); ``ValueError`` naming the entry when it is neither."""
    if isinstance(entry, str) and entry:
        return entry
    if not isinstance(entry, Mapping) or not isinstance(entry.get("path"), str) or not entry["path"]:
        raise ValueError(f"entry {number} is not a path or an object with a 'path'")
    size = entry.get("size")
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 0):
        raise ValueError(f"entry {number} ({entry['path']}) has size {size!r}, not a whole number of bytes")
    return str(entry["path"])


#: Names a writer uses for a file or folder it has not finished (Hadoop/Spark's ``_temporary/``,
#: ``.part``/``.tmp`` files renamed into place when done): a stable-size dataset holding one is not done.
TEMPORARY_DIRS = frozenset({"_temporary"})
TEMPORARY_SUFFIXES = (".part", ".tmp")


def _temporary(rel: str) -> bool:
    parts = rel.strip("/").split("/")
    return any(part in TEMPORARY_DIRS for part in parts[:-1]) or parts[-1].endswith(TEMPORARY_SUFFIXES)


class StabilityTracker:
    """Remembers the last snapshot and when it last changed; see :class:`StableSize`."""

    def __init__(self, rule: StableSize) -> None:
        self.rule = rule
        self.last: dict[str, int] | None = None
        self.changed_at: float | None = None

    def observe(self, current: Mapping[str, int], now: float) -> CompletenessResult:
        """Record a snapshot taken at ``now`` (epoch seconds) and say whether the dataset is stable."""
        current = dict(current)
        if self.last is None or current != self.last:
            self.last = current
            self.changed_at = now
        if not current:
            return CompletenessResult(False, "dataset is empty or does not exist yet")
        temporary = next((rel for rel in sorted(current) if _temporary(rel)), None)
        if temporary is not None:
            return CompletenessResult(
                False,
                f"{temporary} is a temporary file (still being written?)",
                len(current),
                sum(current.values()),
            )
        if not any(current.values()):
            return CompletenessResult(
                False, f"all {len(current)} file(s) are empty (still being written?)", len(current)
            )
        assert self.changed_at is not None
        quiet = now - self.changed_at
        if quiet >= self.rule.period:
            return CompletenessResult(
                True, f"sizes unchanged for {quiet:.0f}s", len(current), sum(current.values())
            )
        return CompletenessResult(
            False,
            f"sizes changed {quiet:.0f}s ago; need {self.rule.period:.0f}s without change",
            len(current),
            sum(current.values()),
        )

    def to_dict(self) -> dict[str, Any]:
        return {"last": self.last, "changed_at": self.changed_at}


def check_once(
    path: Any,
    rule: object = "marker",
    *,
    conn_id: str | None = None,
    tracker: StabilityTracker | None = None,
    now: float | None = None,
    stop: threading.Event | None = None,
) -> CompletenessResult:
    """Check ``path`` once against ``rule``. For :class:`StableSize`, pass the same ``tracker``
    on every call (a single call can never prove stability). Once ``stop`` is set (a trigger running
    the check in a thread was cancelled) checksums stop being read: :class:`CheckStopped`."""
    parsed = parse_completeness(rule)
    fs, inner = resolve(path, conn_id)
    if isinstance(parsed, Marker):
        return check_marker(fs, inner, parsed)
    if isinstance(parsed, Manifest):
        return check_manifest(fs, inner, parsed, stop)
    if tracker is None:
        tracker = StabilityTracker(parsed)
    return tracker.observe(snapshot(fs, inner), time.time() if now is None else now)


def write_marker(path: Any, name: str = "_SUCCESS", *, conn_id: str | None = None) -> str:
    """Write the (empty) marker file last, after every data file; returns its path."""
    fs, inner = resolve(path, conn_id)
    marker = _join(inner, name)
    with fs.open(marker, "wb") as handle:
        handle.write(b"")
    return marker


def write_manifest(
    path: Any, name: str = "_MANIFEST.json", *, conn_id: str | None = None, checksums: bool = True
) -> dict[str, Any]:
    """List every file under ``path`` (except markers/manifests) with size and sha256 into a manifest.

    :raises FileNotFoundError: ``path`` does not exist or holds no files (a manifest of nothing would
        read as complete).
    """
    fs, inner = resolve(path, conn_id)
    if not fs.exists(inner):
        raise FileNotFoundError(
            f"write_manifest: dataset {path} does not exist; write its files first (a manifest of no "
            "files would mark a missing dataset complete)."
        )
    files = []
    for rel, size in sorted(snapshot(fs, inner).items()):
        if rel in (name, "_SUCCESS"):
            continue
        entry: dict[str, Any] = {"path": rel, "size": size}
        if checksums:
            entry["sha256"] = _digest(fs, _join(inner, rel), "sha256")
        files.append(entry)
    if not files:
        raise FileNotFoundError(
            f"write_manifest: dataset {path} holds no files; write its files first (a manifest of no "
            "files would mark an empty dataset complete)."
        )
    data = {"files": files}
    with fs.open(_join(inner, name), "wb") as handle:
        handle.write(json.dumps(data, indent=1, sort_keys=True).encode("utf-8"))
    return data
