"""Tests of ``airflow_gpu_dag.gpu.lease_dir_marker``."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from airflow_gpu_dag.core.model.resources import GpuRequest
from airflow_gpu_dag.gpu.inventory import parse_inventory
from airflow_gpu_dag.gpu.lease import LeaseManager, LeaseOwner, LeaseSettings


def test_an_old_marker_of_another_lease_dir_is_not_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # a worker reconfigured (or gone) long ago: only markers refreshed within twice the ttl count
    import json
    import logging
    import os
    import time

    markers = tmp_path / "markers"
    markers.mkdir()
    old = markers / "0123456789abcdef.json"
    old.write_text(json.dumps({"lease_dir": "/elsewhere", "pid": 1, "ttl_s": 60}))
    long_ago = time.time() - 3600
    os.utime(old, (long_ago, long_ago))
    settings = LeaseSettings(lease_dir=tmp_path / "leases", host_marker_dir=markers, ttl_s=60, poll_s=0.05)
    with caplog.at_level(logging.WARNING, logger="airflow_gpu_dag.gpu.lease_dir_marker"):
        LeaseManager(settings, parse_inventory("1xa100")).acquire(GpuRequest(1), LeaseOwner(task_id="a"))
    assert "another worker" not in caplog.text
    os.utime(old)  # refreshed now: the same marker is fresh
    with caplog.at_level(logging.WARNING, logger="airflow_gpu_dag.gpu.lease_dir_marker"):
        LeaseManager(settings, parse_inventory("2xa100")).acquire(GpuRequest(1), LeaseOwner(task_id="b"))
    assert "/elsewhere" in caplog.text


def test_workers_announce_their_lease_dir_in_a_well_known_place_of_the_host(tmp_path: Path) -> None:
    from airflow_gpu_dag.gpu.lease_dir_marker import default_marker_dir

    settings = LeaseSettings.from_config(lease_dir=tmp_path / "leases")
    assert settings.host_marker_dir == default_marker_dir()
    assert LeaseSettings(lease_dir=tmp_path).host_marker_dir is None  # a library user opts in


# -- LeaseDirMarkers directly ------------------------------------------------------------------------------
def _markers_module() -> Any:
    from airflow_gpu_dag.gpu import lease_dir_marker

    return lease_dir_marker


@pytest.fixture
def fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with no other lease directory warned about (the set is per process)."""
    monkeypatch.setattr(_markers_module(), "_warned", set())


def _other(markers: Path, name: str, body: Any, age: float = 0.0, now: float | None = None) -> Path:
    """A marker file written by another worker ``age`` seconds before ``now``."""
    now = time.time() if now is None else now
    path = markers / name
    path.write_text(body if isinstance(body, str) else json.dumps(body), encoding="utf-8")
    os.utime(path, (now - age, now - age))
    return path


def _theirs(lease_dir: str = "/srv/other-leases", pid: int = 424242, **extra: Any) -> dict[str, Any]:
    return {"lease_dir": lease_dir, "pid": pid, "host": socket.gethostname(), "ttl_s": 60, **extra}


def test_touch_announces_the_lease_dir_in_a_file_named_after_it(tmp_path: Path) -> None:
    from airflow_gpu_dag.gpu.lease_dir_marker import LeaseDirMarkers

    markers = LeaseDirMarkers(tmp_path / "markers", tmp_path / "leases", 45.0)
    markers.touch()
    body = json.loads(markers.path.read_text(encoding="utf-8"))
    assert body == {
        "lease_dir": str(tmp_path / "leases"),
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "ttl_s": 45.0,
    }
    assert [p.name for p in (tmp_path / "markers").iterdir()] == [markers.path.name]  # no temp file left
    markers.touch()  # refreshing replaces it
    assert len(list((tmp_path / "markers").iterdir())) == 1


def test_the_marker_place_is_shared_by_every_user_of_the_host(tmp_path: Path) -> None:
    """Sticky and world-writable, like /tmp: other users' workers may announce, not remove ours."""
    import stat

    from airflow_gpu_dag.gpu.lease_dir_marker import LeaseDirMarkers

    LeaseDirMarkers(tmp_path / "markers", tmp_path / "leases", 60).touch()
    assert stat.S_IMODE((tmp_path / "markers").stat().st_mode) == 0o1777


def test_a_relative_lease_dir_is_the_same_directory_as_its_absolute_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_gpu_dag.gpu.lease_dir_marker import LeaseDirMarkers

    monkeypatch.chdir(tmp_path)
    relative = LeaseDirMarkers(tmp_path / "m", Path("leases"), 60)
    absolute = LeaseDirMarkers(tmp_path / "m", tmp_path / "leases", 60)
    dotted = LeaseDirMarkers(tmp_path / "m", tmp_path / "x" / ".." / "leases", 60)
    assert relative.path == absolute.path == dotted.path
    assert relative.lease_dir == tmp_path / "leases"


def test_touch_never_raises_when_the_marker_place_is_unusable(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    from airflow_gpu_dag.gpu.lease_dir_marker import LeaseDirMarkers

    (tmp_path / "markers").write_text("a file, not a directory")
    markers = LeaseDirMarkers(tmp_path / "markers", tmp_path / "leases", 60)
    with caplog.at_level(logging.DEBUG, logger="airflow_gpu_dag.gpu.lease_dir_marker"):
        markers.touch()
    assert "not written" in caplog.text
    assert markers.others() == []  # and looking finds nothing, without raising


def test_a_missing_marker_place_has_no_other_lease_dirs(tmp_path: Path) -> None:
    from airflow_gpu_dag.gpu.lease_dir_marker import LeaseDirMarkers

    assert LeaseDirMarkers(tmp_path / "absent", tmp_path / "leases", 60).others() == []
    assert not (tmp_path / "absent").exists()  # looking creates nothing


def test_a_fresh_marker_of_another_lease_dir_by_another_process_is_found(tmp_path: Path) -> None:
    from airflow_gpu_dag.gpu.lease_dir_marker import LeaseDirMarkers

    now = 1_800_000_000.0
    markers = LeaseDirMarkers(tmp_path, tmp_path / "leases", 60)
    _other(tmp_path, "a.json", _theirs(), age=100, now=now)
    (found,) = markers.others(now)
    assert found["lease_dir"] == "/srv/other-leases" and found["pid"] == 424242
    assert found["age_s"] == pytest.approx(100)


def test_markers_of_this_lease_dir_or_of_this_process_are_not_others(tmp_path: Path) -> None:
    from airflow_gpu_dag.gpu.lease_dir_marker import LeaseDirMarkers

    markers = LeaseDirMarkers(tmp_path, tmp_path / "leases", 60)
    markers.touch()  # our own marker
    _other(tmp_path, "same-dir.json", _theirs(lease_dir=str(tmp_path / "leases")))
    _other(tmp_path, "this-process.json", _theirs(pid=os.getpid()))  # our previous lease dir
    assert markers.others() == []


@pytest.mark.parametrize(
    ("their_ttl", "age", "found"),
    [
        (60, 119, True),
        (60, 121, False),
        (600, 1199, True),  # their window is longer: the larger ttl counts
        (5, 119, True),  # theirs shorter: ours counts
        (True, 121, False),  # a bool is no ttl
        ("600", 121, False),  # nor a string
        (float("nan"), 121, False),
        (float("inf"), 121, False),
        (-600, 119, True),
        (None, 119, True),
    ],
)
def test_a_marker_counts_as_fresh_within_twice_the_larger_ttl(
    tmp_path: Path, their_ttl: Any, age: float, found: bool
) -> None:
    from airflow_gpu_dag.gpu.lease_dir_marker import LeaseDirMarkers

    now = 1_800_000_000.0
    _other(tmp_path, "a.json", _theirs(ttl_s=their_ttl), age=age, now=now)
    assert bool(LeaseDirMarkers(tmp_path, tmp_path / "leases", 60).others(now)) is found


def test_a_marker_nobody_refreshed_for_a_day_is_removed(tmp_path: Path) -> None:
    from airflow_gpu_dag.gpu.lease_dir_marker import LeaseDirMarkers

    now = 1_800_000_000.0
    forgotten = _other(tmp_path, "old.json", _theirs(ttl_s=1e9), age=86400 + 1, now=now)
    kept = _other(tmp_path, "quiet.json", _theirs("/srv/quiet"), age=86400 - 1, now=now)
    not_json = _other(tmp_path, "junk.json", "{", age=86400 + 1, now=now)
    assert LeaseDirMarkers(tmp_path, tmp_path / "leases", 60).others(now) == []
    assert not forgotten.exists() and not not_json.exists() and kept.exists()


@pytest.mark.parametrize(
    "body",
    [
        "",
        "{not json",
        "[1, 2]",
        '"a string"',
        "null",
        '{"pid": 7}',
        '{"lease_dir": 7, "pid": 7}',
        '{"lease_dir": ["/srv/x"], "pid": 7}',
    ],
)
def test_a_marker_that_cannot_be_read_is_skipped(tmp_path: Path, body: str) -> None:
    from airflow_gpu_dag.gpu.lease_dir_marker import LeaseDirMarkers

    _other(tmp_path, "bad.json", body)
    _other(tmp_path, "good.json", _theirs())
    found = LeaseDirMarkers(tmp_path, tmp_path / "leases", 60).others()
    assert [f["lease_dir"] for f in found] == ["/srv/other-leases"]


def test_a_marker_that_is_not_utf8_or_not_a_file_is_skipped(tmp_path: Path) -> None:
    from airflow_gpu_dag.gpu.lease_dir_marker import LeaseDirMarkers

    (tmp_path / "latin1.json").write_bytes(b'{"lease_dir": "/srv/caf\xe9", "pid": 7}')
    (tmp_path / "dir.json").mkdir()
    _other(tmp_path, "notes.txt", _theirs("/srv/not-a-marker"))  # not *.json
    assert LeaseDirMarkers(tmp_path, tmp_path / "leases", 60).others() == []


def test_a_marker_from_the_future_is_fresh_and_zero_seconds_old(tmp_path: Path) -> None:
    """Clocks step (NTP): a marker written 'later' than now is fresh, not of negative age."""
    from airflow_gpu_dag.gpu.lease_dir_marker import LeaseDirMarkers

    now = 1_800_000_000.0
    _other(tmp_path, "a.json", _theirs(), age=-30, now=now)
    (found,) = LeaseDirMarkers(tmp_path, tmp_path / "leases", 60).others(now)
    assert found["age_s"] == 0.0


def test_unicode_lease_dirs_are_announced_and_compared_exactly(tmp_path: Path) -> None:
    from airflow_gpu_dag.gpu.lease_dir_marker import LeaseDirMarkers

    mine = LeaseDirMarkers(tmp_path / "m", tmp_path / "leases-ü", 60)
    theirs = LeaseDirMarkers(tmp_path / "m", tmp_path / "leases-u\u0308", 60)  # decomposed: another dir
    mine.touch()
    _other(tmp_path / "m", theirs.path.name, _theirs(str(theirs.lease_dir)))
    assert [f["lease_dir"] for f in mine.others()] == [str(tmp_path / "leases-u\u0308")]
    assert json.loads(mine.path.read_text(encoding="utf-8"))["lease_dir"] == str(tmp_path / "leases-ü")


@pytest.mark.usefixtures("fresh_warnings")
def test_announce_warns_once_per_other_lease_dir_naming_both_and_the_fix(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    from airflow_gpu_dag.gpu.lease_dir_marker import LeaseDirMarkers

    markers = LeaseDirMarkers(tmp_path / "m", tmp_path / "leases", 60)
    (tmp_path / "m").mkdir()
    _other(tmp_path / "m", "a.json", _theirs("/srv/a"))
    with caplog.at_level(logging.WARNING, logger="airflow_gpu_dag.gpu.lease_dir_marker"):
        first = markers.announce()
        second = markers.announce()
    assert [o["lease_dir"] for o in first] == [o["lease_dir"] for o in second] == ["/srv/a"]
    (warning,) = [r.getMessage() for r in caplog.records]
    assert str(tmp_path / "leases") in warning and "/srv/a" in warning and "pid 424242" in warning
    assert "Fix: set [gpu_dag] lease_dir" in warning and str(tmp_path / "m") in warning
    assert markers.path.exists()  # announce also touched ours
    caplog.clear()
    _other(tmp_path / "m", "b.json", _theirs("/srv/b", pid=434343))
    with caplog.at_level(logging.WARNING, logger="airflow_gpu_dag.gpu.lease_dir_marker"):
        assert len(markers.announce()) == 2
    (warning,) = [r.getMessage() for r in caplog.records]  # only the new one
    assert "/srv/b" in warning


def test_the_marker_place_is_the_temp_dir_where_dev_shm_is_not_writable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tempfile

    from airflow_gpu_dag.gpu.lease_dir_marker import default_marker_dir

    module = _markers_module()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(module.os, "access", lambda path, mode: False)
    assert default_marker_dir() == tmp_path / "airflow-gpu-dag-lease-dirs"


def test_a_lease_dir_whose_name_is_not_utf8_does_not_block_the_lease(tmp_path: Path) -> None:
    """The module promises the check never blocks a lease; the lease table itself works in such a
    directory (a path from a non-UTF-8 environment variable, decoded with surrogateescape)."""
    lease_dir = Path(os.fsdecode(os.fsencode(str(tmp_path)) + b"/leases-\xff"))
    settings = LeaseSettings(lease_dir=lease_dir, host_marker_dir=tmp_path / "m", ttl_s=60, poll_s=0.05)
    LeaseManager(settings, parse_inventory("1xa100")).acquire(GpuRequest(1), LeaseOwner(task_id="a"))
    assert len(list((tmp_path / "m").glob("*.json"))) == 1


def test_a_marker_of_another_host_with_our_pid_is_another_worker(tmp_path: Path) -> None:
    """Containers sharing the host's /dev/shm (``--ipc=host``) have their own pid namespaces and host
    names: another container's worker may have our pid. The marker names its host; only a marker of
    this host with our pid is this process."""
    from airflow_gpu_dag.gpu.lease_dir_marker import LeaseDirMarkers

    _other(tmp_path, "a.json", _theirs(pid=os.getpid(), host="another-container"))
    assert [f["lease_dir"] for f in LeaseDirMarkers(tmp_path, tmp_path / "leases", 60).others()] == [
        "/srv/other-leases"
    ]
