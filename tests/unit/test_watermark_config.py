"""Watermark configuration file, lease/lock primitives, and the CLI entry point's arguments."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_gpu_dag.watermark.config import ConfigError, load_config, parse_config
from airflow_gpu_dag.watermark.leader_lock import FileLeaderLock, VariableLeaderLock

YAML = """
interval: 30
lease: {lock_file: null, variable: wm_lease, ttl: 90}
pools:
  gpu_a100:
    source: {type: nvml, min_free_memory: 40GiB, max_utilization: 10}
    floor: 1
    stale_intervals: 2
  gpu_k8s:
    source: {type: kubernetes, label_selector: "gpu=a100"}
    backfill: false
  gpu_prom:
    source: {type: prometheus, url: "http://prom:9090", selector: '{Hostname=~"gpu-.*"}'}
  gpu_fixed:
    source: 8
"""


def test_yaml_config(tmp_path: Path) -> None:
    path = tmp_path / "wm.yaml"
    path.write_text(YAML)
    config = load_config(path)
    assert config.interval == 30 and config.lease.variable == "wm_lease" and config.lease_ttl() == 90
    assert config.lease.lock_file is None
    pools = {p.name: p for p in config.pools}
    assert pools["gpu_a100"].source.options == {"min_free_memory": 40960, "max_utilization": 10}
    assert (pools["gpu_a100"].floor, pools["gpu_a100"].stale_intervals) == (1, 2)
    assert pools["gpu_k8s"].backfill is False
    assert pools["gpu_fixed"].source.type == "static" and pools["gpu_fixed"].source.options == {"gpus": 8}


def test_json_config_and_default_ttl(tmp_path: Path) -> None:
    path = tmp_path / "wm.json"
    path.write_text(json.dumps({"interval": 5, "pools": {"gpu": {"source": {"type": "static", "gpus": 2}}}}))
    config = load_config(path)
    assert config.lease_ttl() == 15 and config.lease.lock_file and config.lease.variable


def test_an_empty_lease_key_is_the_default_lease_and_null_locks_turn_it_off() -> None:
    default = parse_config({"pools": {"g": {"source": 2}}, "lease": None}).lease
    assert default.lock_file and default.variable
    off = parse_config({"pools": {"g": {"source": 2}}, "lease": {"lock_file": None, "variable": None}}).lease
    assert (off.lock_file, off.variable) == (None, None)


def test_default_config_from_gpu_dag_pools(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__GPU_DAG__POOLS", '{"gpu_default": 8}')
    config = load_config(None)
    assert [(p.name, p.source.options["gpus"]) for p in config.pools] == [("gpu_default", 8)]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({}, "'pools' must map at least one pool"),
        ({"pools": {"g": {"floor": 1}}}, r"pools.g.source: missing"),
        ({"pools": {"g": {"source": {"type": "magic"}}}}, r"pools.g.source.type: expected one of"),
        ({"pools": {"g": {"source": {"type": "static"}}}}, r"pools.g.source.gpus"),
        ({"pools": {"g": {"source": 2, "flor": 1}}}, r"pools.g: unknown keys \['flor'\] \(known: .*'floor'"),
        (
            {"pools": {"g": {"source": "nvml", "min_free_memory": "40GiB"}}},
            r"pools.g: unknown keys \['min_free_memory'\].*min_free_memory belong inside the source",
        ),
        ({"pools": {"g": {"source": "prometheus"}}}, r"pools.g.source.url: a prometheus source needs"),
        ({"pools": {"g": {"source": "magic"}}}, r"pools.g.source: expected a mapping like"),
        ({"pools": {"g": {"source": 2, "floor": -1}}}, r"pools.g.floor: expected an integer >= 0"),
        ({"pools": {"g": {"source": {"type": "prometheus"}}}}, r"pools.g.source.url"),
        ({"pools": {"g": {"source": {"type": "nvml", "min_free_memory": "lots"}}}}, r"min_free_memory"),
        ({"pools": {"g": {"source": 2}}, "interval": 0}, "interval: expected seconds > 0"),
        ({"pools": {"g": {"source": 2}}, "interval": "soon"}, 'interval: .* a duration like "30s"'),
        ({"pools": {"g": {"source": 2}}, "interval": float("nan")}, "interval: expected seconds > 0"),
        ({"pools": {"g": {"source": 2}}, "intervall": 5}, r"unknown keys \['intervall'\]"),
        ({"pools": {"g": {"source": 2}}, "fail_open_after": 1}, "fail_open_after: expected an integer >= 2"),
        ({"pools": {"g": {"source": 2}}, "lease": {"ttl": "-1s"}}, "lease.ttl"),
        ({"pools": {"g": {"source": 2}}, "lease": {"variable": 7}}, "lease.variable: expected a non-empty"),
        # `lease: false` used to mean the default lease (both locks on), the opposite of what it says
        ({"pools": {"g": {"source": 2}}, "lease": False}, r"to run without a lease set \{lock_file: null"),
        ({"pools": {"g": {"source": 2}}, "lease": 0}, "lease: expected a mapping"),
        ({"pools": {"g": {"source": -2}}}, r"pools.g.source \(static GPU count\)"),
        ({"pools": {"g": {"source": 2, "floor": float("inf")}}}, "pools.g.floor"),
        ({"pools": {"g": {"source": 2, "source_timeout": "0s"}}}, "pools.g.source_timeout"),
        ({"pools": {"": {"source": 2}}}, "pool names must be non-empty"),
        ({"pools": {"g" * 300: {"source": 2}}}, "longer than 256"),
        ({"pools": {"g": {"source": {"type": "file", "path": ["a"]}}}}, "pools.g.source.path"),
        ({"pools": {"g": {"source": {"type": "file", "path": "/x", "max_age": "old"}}}}, "max_age"),
        (
            {"pools": {"g": {"source": 2, "reservation": "yes"}}},
            "pools.g.reservation: expected true or false",
        ),
        # found by an audit: values that loaded and then misbehaved at run time
        ({"pools": {"g": {"source": 2}}, "interval": 1e10}, "interval: at most 1 day"),
        ({"pools": {"g": {"source": 2}}, "fail_open_after": 10**12}, "more than 30 days"),
        ({"pools": {"g": {"source": 2}}, "interval": 60, "lease": {"ttl": 1}}, "must be longer than the"),
        ({"pools": {"g": {"source": 2**31}}}, r"<= 1,000,000"),
        ({"pools": {"g": {"source": 2, "floor": 10**20}}}, r"pools.g.floor: .*<= 1,000,000"),
        (
            {"pools": {"g": {"source": {"type": "nvml", "devices": "0,1"}}}},
            "devices: expected a non-empty list",
        ),
        ({"pools": {"g": {"source": {"type": "nvml", "devices": []}}}}, "devices: expected a non-empty list"),
        ({"pools": {"g": {"source": {"type": "nvml", "devices": ["a"]}}}}, r"devices\[0\] \(a GPU index\)"),
        ({"pools": {"g": {"source": {"type": "nvml", "devices": [0, 1]}, "floor": 3}}}, "exceeds the 2 GPUs"),
        ({"pools": {"g": {"source": {"type": "nvml", "max_utilization": 150}}}}, r"max_utilization \(%\)"),
        ({"pools": {"g": {"source": {"type": "nvml", "leases": "no"}}}}, "leases: expected true or false"),
        ({"pools": {"g": {"source": {"type": "nvml", "lease_dir": 7}}}}, "lease_dir: expected a non-empty"),
        (
            {"pools": {"g": {"source": {"type": "prometheus", "url": "http://p", "headers": "bad"}}}},
            "headers: expected a mapping of header name to text",
        ),
        ({"pools": {1: {"source": 2}, "1": {"source": 3}}}, "'1' defined twice"),
    ],
)
def test_config_errors_name_the_key(raw: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(raw)


@pytest.mark.parametrize(
    ("pool", "where"),
    [
        ({"source": 2, "source_timeout": None}, "pools.g.source_timeout"),
        ({"source": {"type": "prometheus", "url": "http://p", "timeout": None}}, "pools.g.source.timeout"),
        ({"source": {"type": "kubernetes", "timeout": None}}, "pools.g.source.timeout"),
    ],
)
def test_a_time_limit_cannot_be_null(tmp_path: Path, pool: dict, where: str) -> None:
    # null once meant "no limit": a source that never answered blocked every tick of the controller
    with pytest.raises(ConfigError, match=rf"{where}: null would let a source that never answers block"):
        parse_config({"pools": {"g": pool}})
    path = tmp_path / "watermark.yaml"
    path.write_text("pools:\n  g:\n    source: 2\n    source_timeout: null\n")
    with pytest.raises(ConfigError, match=r"pools\.g\.source_timeout: null would let"):
        load_config(path)


def test_a_left_out_time_limit_is_the_default() -> None:
    (pool,) = parse_config({"pools": {"g": {"source": {"type": "kubernetes"}}}}).pools
    assert pool.source_timeout == 30.0 and "timeout" not in pool.source.options
    (pool,) = parse_config({"pools": {"g": {"source": 2, "source_timeout": "2m"}}}).pools
    assert pool.source_timeout == 120.0


def test_a_source_type_alone_is_that_source_with_its_defaults() -> None:
    (pool,) = parse_config({"pools": {"g": {"source": " nvml"}}}).pools
    assert (pool.source.type, pool.source.options) == ("nvml", {})


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"absent.yaml: no such file; check the --config path"):
        load_config(tmp_path / "absent.yaml")
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"pools:\xff\xfe")
    with pytest.raises(ConfigError, match="cannot read it as UTF-8 text"):
        load_config(binary)
    bad = tmp_path / "bad.yaml"
    bad.write_text("pools: [unclosed")
    with pytest.raises(ConfigError, match="not valid JSON/YAML"):
        load_config(bad)


def test_file_lock_excludes_and_is_freed_when_the_holder_dies(tmp_path: Path) -> None:
    path = tmp_path / "wm.lock"
    first, second = FileLeaderLock(path), FileLeaderLock(path)
    assert first.acquire() and first.acquire()  # re-entrant for its holder
    assert not second.acquire()
    first.release()
    assert second.acquire()
    second.release()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import fcntl,sys,time;f=open({str(path)!r},'a');fcntl.flock(f,fcntl.LOCK_EX);"
            "print('locked',flush=True);time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        assert not first.acquire()
    finally:
        holder.kill()
        holder.wait()
    assert first.acquire()  # the kernel released the dead holder's lock
    first.release()


class MemoryStore:
    def __init__(self) -> None:
        self.values: dict[str, str] = {}

    def get_variable(self, key: str) -> str | None:
        return self.values.get(key)

    def create_variable(self, key: str, value: str, description: str = "") -> bool:
        if key in self.values:
            return False
        self.values[key] = value
        return True

    def put_variable(self, key: str, value: str, description: str = "") -> None:
        self.values[key] = value


def test_variable_lease_expiry_takeover_and_release() -> None:
    store, now = MemoryStore(), {"t": 1000.0}
    a = VariableLeaderLock(store, "lease", "a", ttl=30, clock=lambda: now["t"])
    b = VariableLeaderLock(store, "lease", "b", ttl=30, clock=lambda: now["t"])
    assert a.acquire() and not b.acquire() and b.current_holder == "a"
    now["t"] += 29
    assert a.acquire() and not b.acquire()
    now["t"] += 31
    assert b.acquire() and not a.acquire()
    b.release()
    assert a.acquire()
    store.values["lease"] = "garbage"
    assert b.acquire()  # an unreadable lease counts as expired


def test_cli_arguments_parse() -> None:
    import argparse

    from airflow_gpu_dag.cli.watermark_command import WATERMARK_ARGS, WATERMARK_COMMAND

    parser = argparse.ArgumentParser()
    for arg in WATERMARK_ARGS:
        arg.add_to_parser(parser)
    args = parser.parse_args(["--once", "--interval", "2.5", "--config", "x.yaml"])
    assert (args.once, args.interval, args.config, args.conn_id) == (True, 2.5, "x.yaml", "gpu_dag_api")
    with pytest.raises(SystemExit):
        parser.parse_args(["--interval", "-1"])
    assert WATERMARK_COMMAND.name == "watermark"


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("twice.yaml", "pools:\n  gpu_a: {source: 4}\n  gpu_a: {source: 8}\n", "'gpu_a' is given twice"),
        (
            "twice.json",
            '{"pools": {"gpu_a": {"source": 4}, "gpu_a": {"source": 8}}}',
            "'gpu_a' is given twice",
        ),
        ("empty.yaml", "\n", "the file is empty"),
    ],
)
def test_files_with_a_key_given_twice_or_nothing_in_them(
    tmp_path: Path, name: str, text: str, message: str
) -> None:
    """YAML and JSON keep the last of two equal keys silently: a pool defined twice loaded as the second."""
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError, match=message) as err:
        load_config(path)
    assert str(err.value).count("watermark config") == 1  # was "watermark config F: watermark config: ..."


def test_an_unusable_lock_file_is_refused_before_any_pool_is_created(tmp_path: Path) -> None:
    """A lock file that is a directory (or not writable) failed every tick after the start-up check had
    created the pools at 0 slots, and nothing ever sized or reopened them."""
    from airflow_gpu_dag.watermark.controller import build_controller
    from airflow_gpu_dag.watermark.leader_lock import FileLeaderLock

    config = parse_config(
        {"pools": {"g": {"source": 2}}, "lease": {"lock_file": str(tmp_path), "variable": None}}
    )
    with pytest.raises(ConfigError, match=r"lease.lock_file .*: cannot be opened"):
        build_controller(config, client=object())  # type: ignore[arg-type]
    build_controller(config, client=object(), dry_run=True)  # type: ignore[arg-type]  # takes no lease
    assert FileLeaderLock(tmp_path).acquire() is False  # gone unusable later: stand by, do not raise


def test_a_key_merged_from_an_anchor_may_be_overridden(tmp_path: Path) -> None:
    """YAML's merge key: `<<: *base` then `floor: 1` overrides the merged floor; not a key given twice."""
    path = tmp_path / "anchors.yaml"
    path.write_text("pools:\n  gpu_a: &base {source: 4, floor: 0}\n  gpu_b: {<<: *base, floor: 1}\n")
    config = load_config(path)
    assert [(p.name, p.floor) for p in config.pools] == [("gpu_a", 0), ("gpu_b", 1)]
