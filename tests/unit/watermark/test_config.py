"""Watermark configuration file, lease/lock primitives, and the CLI entry point's arguments."""

from __future__ import annotations

import copy
import json
import math
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_gpu_dag.hooks.rest_client import MAX_ITEMS
from airflow_gpu_dag.watermark.config import ConfigError, PoolSpec, SourceSpec, load_config, parse_config
from airflow_gpu_dag.watermark.controller import WatermarkController
from airflow_gpu_dag.watermark.leader_lock import FileLeaderLock, VariableLeaderLock
from airflow_gpu_dag.watermark.sources import CapacityTracker, PrometheusSource, SourceError, build_sources
from tests.unit.hooks.conftest import TrickleServer
from tests.unit.watermark.conftest import (
    FUZZ_SETTINGS,
    FUZZ_VALUES,
    NOW,
    FakeRest,
    Source,
    mock_rest_client,
    ti,
)

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
        # `lease: false` must not mean the default lease (both locks on), the opposite of what it says
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
        # values that would load and then misbehave at run time
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


POOL_KEYS = ["source", "floor", "stale_intervals", "reservation", "backfill", "lookahead", "source_timeout"]


SOURCE_KEYS = ["type", "gpus", "path", "max_age", "url", "timeout", "min_free_memory", "max_utilization"]


#: Options of the network and device sources (built by the controller, so fuzzed through it too).
MORE_SOURCE_KEYS = [
    "conn_id",
    "selector",
    "headers",
    "airflow_namespaces",
    "airflow_pod_pattern",
    "host_label",
    "label_selector",
    "airflow_pod_labels",
    "resource",
    "context",
    "kubernetes_conn_id",
    "devices",
    "leases",
    "lease_dir",
]


@st.composite
def configs(draw: st.DrawFn) -> Any:
    """Documents near the real format (so the deep checks run), with random values anywhere."""
    source = draw(
        st.one_of(
            FUZZ_VALUES,
            st.fixed_dictionaries(
                {"type": st.sampled_from(["static", "file", "prometheus", "kubernetes", "nvml", "magic", 3])},
                optional={k: FUZZ_VALUES for k in SOURCE_KEYS[1:] + MORE_SOURCE_KEYS},
            ),
        )
    )
    pool = draw(
        st.fixed_dictionaries({"source": st.just(source)}, optional={k: FUZZ_VALUES for k in POOL_KEYS[1:]})
    )
    names = st.one_of(st.text(max_size=300), st.integers(), st.sampled_from(["gpu", "gpu_a100", "ü/ñ"]))
    doc = draw(
        st.fixed_dictionaries(
            {"pools": st.one_of(st.dictionaries(names, st.just(pool), min_size=1, max_size=3), FUZZ_VALUES)},
            optional={
                "interval": FUZZ_VALUES,
                "fail_open_after": FUZZ_VALUES,
                "lease": st.one_of(
                    FUZZ_VALUES,
                    st.fixed_dictionaries({}, optional={"ttl": FUZZ_VALUES, "variable": FUZZ_VALUES}),
                ),
            },
        )
    )
    return draw(st.one_of(st.just(doc), FUZZ_VALUES))


def _sane(config: Any) -> None:
    assert math.isfinite(config.interval) and config.interval > 0
    assert isinstance(config.fail_open_after, int) and config.fail_open_after >= 2
    assert config.lease.ttl is None or (math.isfinite(config.lease.ttl) and config.lease.ttl > 0)
    assert config.pools
    for pool in config.pools:
        assert isinstance(pool.name, str) and 0 < len(pool.name) <= 256
        assert isinstance(pool.floor, int) and pool.floor >= 0
        assert isinstance(pool.stale_intervals, int) and pool.stale_intervals >= 0
        assert math.isfinite(pool.source_timeout) and 0 < pool.source_timeout <= 86400
        if pool.source.type == "static":
            assert isinstance(pool.source.options["gpus"], int) and pool.source.options["gpus"] >= 0


#: Pieces of YAML syntax: documents put together from them reach the YAML parser's corners (anchors,
#: aliases, merges, tags, flow and block styles, several documents) and the loader's checks behind it.
YAML_PIECES = [
    "pools:",
    "\n",
    "\n  ",
    "\n    ",
    " ",
    "gpu:",
    "gpu_a100:",
    "source:",
    "source: 4",
    "source: nvml",
    "type: prometheus",
    "type: static",
    "type: file",
    "gpus: 8",
    "url: http://127.0.0.1:9",
    "timeout: 1s",
    "source_timeout:",
    "source_timeout: 30s",
    "source_timeout: null",
    "interval: 30s",
    "lease:",
    "ttl: 3m",
    "floor: 1",
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "- ",
    "&a ",
    "*a",
    "<<: *a",
    "!!str ",
    "!!int ",
    "!!binary ",
    "!!python/object/apply:os.system ['true']",
    "!!set ",
    "? ",
    "|",
    ">",
    "'",
    '"',
    "null",
    "~",
    "true",
    "1e400",
    ".inf",
    ".nan",
    "-1",
    "0x10",
    "0o7",
    "2026-01-01",
    "%YAML 1.1\n",
    "---\n",
    "...\n",
    "#c",
    "\t",
    "ü",
    "\x00",
    "\ufeff",
    "\\",
    "=",
]


yaml_texts = st.lists(st.sampled_from(YAML_PIECES), max_size=40).map("".join)


def _tick_never_raises(config: Any) -> None:
    """A controller built from ``config`` ticks without raising, sizes within capacity. The network
    and device sources are built (their options fuzzed) but a stand-in answers for them: the tick
    must not reach out to random URLs or this host's GPUs."""
    try:
        built = build_sources(config.pools)
    except ConfigError as err:
        assert str(err).startswith("pools.")
        return
    sources = {
        name: source if source.kind in ("static", "file") else Source(SourceError("stand-in"))
        for name, source in built.items()
    }
    rest = FakeRest()
    rest.tis = [
        ti("hold", "running", started=NOW - 10, duration=100, pool=config.pools[0].name),
        ti("wide", "scheduled", slots=2, priority=10, pool=config.pools[0].name),
    ]
    controller = WatermarkController(config, rest, sources, default_duration=60.0, clock=lambda: NOW)  # type: ignore[arg-type]
    for outcome in controller.tick():
        assert outcome.size is None or 0 <= outcome.size <= max(outcome.capacity.gpus, 0)


# -- the REST client on a broken api-server ----------------------------------------------------------------


@FUZZ_SETTINGS
@given(configs())
def test_config_loader_gives_a_clear_error_or_a_sane_config(raw: Any) -> None:
    try:
        config = parse_config(raw)
    except ConfigError as err:
        assert str(err) and len(str(err)) < 2000
        return
    _sane(config)
    try:  # a config that parses builds a controller, or names the pool whose source options are bad
        WatermarkController(config, FakeRest(), default_duration=60.0)  # type: ignore[arg-type]
    except ConfigError as err:
        assert str(err).startswith("pools.")


@FUZZ_SETTINGS
@given(st.one_of(st.binary(max_size=200), st.text(max_size=200)), st.sampled_from(["wm.yaml", "wm.json"]))
def test_config_files_of_garbage_give_a_clear_error(tmp_path_factory: Any, content: Any, name: str) -> None:
    path = Path(tmp_path_factory.mktemp("cfg")) / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    try:
        _sane(load_config(path))
    except ConfigError as err:
        assert str(path) in str(err)


@FUZZ_SETTINGS
@given(yaml_texts, st.sampled_from(["wm.yaml", "wm.json"]))
def test_yaml_documents_give_a_clear_error_or_a_config_that_ticks(
    tmp_path_factory: Any, text: str, name: str
) -> None:
    path = Path(tmp_path_factory.mktemp("cfg")) / name
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        config = load_config(path)
    except ConfigError as err:
        assert str(path) in str(err) and len(str(err)) < 2000
        return
    _sane(config)
    _tick_never_raises(config)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs(), st.sampled_from(["yaml", "json"]))
def test_config_files_of_any_values_give_a_clear_error_or_a_config_that_ticks(
    tmp_path_factory: Any, raw: Any, kind: str
) -> None:
    path = Path(tmp_path_factory.mktemp("cfg")) / f"wm.{kind}"
    try:
        text = json.dumps(raw) if kind == "json" else yaml.safe_dump(raw, allow_unicode=True)
    except (ValueError, TypeError, yaml.YAMLError):  # NaN in strict JSON, keys YAML cannot write
        return
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        config = load_config(path)
    except ConfigError as err:
        assert str(path) in str(err) and len(str(err)) < 2000
        return
    _sane(config)
    _tick_never_raises(config)


def test_an_alias_bomb_is_refused_in_bounded_time(tmp_path: Path) -> None:
    # nine lists of nine, eight levels deep: 9**8 strings once written out in full, as the error
    # message once did (20 s and hundreds of MB); the message shows a few levels and items
    nested = '&l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]'
    for level in range(1, 8):  # each level defined inside the next, as one flow sequence
        nested = f"&l{level} [{nested}, " + ", ".join([f"*l{level - 1}"] * 8) + "]"
    path = tmp_path / "wm.yaml"
    pools = {
        "source": f"source: {nested}",
        "floor": f"source: 2\n    floor: {nested}",
        "source_timeout": f"source: 2\n    source_timeout: {nested}",
        "source.min_free_memory": f"source: {{type: nvml, min_free_memory: {nested}}}",
    }
    for where, pool in pools.items():
        path.write_text(f"pools:\n  gpu:\n    {pool}\n")
        started = time.monotonic()
        with pytest.raises(ConfigError, match=f"pools.gpu.{where}") as err:
            load_config(path)
        assert time.monotonic() - started < 2.0 and len(str(err.value)) < 1000


@pytest.mark.parametrize("key", ["source_timeout", "timeout"])
def test_a_time_limit_longer_than_a_day_is_refused(key: str) -> None:
    # 1e12 s once loaded: the worker thread's join() then failed on every read (OverflowError), and
    # the pool sat at its floor with a source that was fine
    pool: dict[str, Any] = {"source": {"type": "kubernetes"}}
    if key == "timeout":
        pool["source"]["timeout"] = 1e12
    else:
        pool[key] = 1e12
    with pytest.raises(ConfigError, match=r"at most 1 day"):
        parse_config({"pools": {"gpu": pool}})


def test_a_pod_pattern_that_is_no_regular_expression_is_a_config_error() -> None:
    config = parse_config(
        {"pools": {"gpu": {"source": {"type": "prometheus", "url": "http://p", "airflow_pod_pattern": "(("}}}}
    )
    with pytest.raises(ConfigError, match=r"pools.gpu.source: airflow_pod_pattern '\(\(' is not a regular"):
        build_sources(config.pools)


def test_an_endless_list_is_refused() -> None:
    calls = {"n": 0}

    def handler(request: httpx.Request) -> httpx.Response:
        calls["n"] += 1
        page = [{"pool": "gpu", "state": "scheduled"}] * 100
        return httpx.Response(200, json={"task_instances": page, "total_entries": 10**12})

    rest = mock_rest_client(handler)
    config = parse_config({"pools": {"gpu": {"source": 0}}, "lease": {"lock_file": None, "variable": None}})
    controller = WatermarkController(
        config, rest, {"gpu": Source(4)}, default_duration=60.0, clock=lambda: NOW
    )  # type: ignore[dict-item]
    (outcome,) = controller.tick()
    assert outcome.error is not None and f"more than {MAX_ITEMS} items" in outcome.error
    assert calls["n"] <= MAX_ITEMS // 100 + 5


def test_an_nvml_device_listed_twice_is_an_error_naming_the_key() -> None:
    """``devices: [0, 0]`` loaded silently: the source counts GPU 0 once, while ``floor: 2`` passed the
    check against the list's length and kept 2 slots for one GPU once the source failed."""
    raw = {"pools": {"gpu": {"source": {"type": "nvml", "devices": [0, 1, 0]}, "floor": 2}}}
    with pytest.raises(ConfigError, match=r"pools\.gpu\.source\.devices: GPU index 0 is listed twice"):
        parse_config(raw)


def test_a_lease_shorter_than_a_tick_with_its_sources_is_reported() -> None:
    """``interval: 10`` warned that 3 x 10 s of claim is too short for a tick with a 30-s source and said
    to raise fail_open_after to 6; done, nothing was reported, yet the default lease (3 x 10 s) still
    ran out during such a tick: the tick wrote no pool and a standby took the lease over."""
    raw: dict[str, Any] = {"interval": 10, "fail_open_after": 6, "pools": {"gpu": {"source": 4}}}
    risk = parse_config(raw).fail_open_risk()
    assert risk is not None and "lease.ttl (30 s)" in risk and "(40 s)" in risk
    assert "fail_open_after" not in risk and "set lease.ttl to 50s" in risk
    assert parse_config({**raw, "lease": {"ttl": "50s"}}).fail_open_risk() is None
    no_variable = {**raw, "lease": {"variable": None}}  # a host lock file does not expire
    assert parse_config(no_variable).fail_open_risk() is None
    both = parse_config({**raw, "fail_open_after": 3}).fail_open_risk()
    assert both is not None and "fail_open_after to 6" in both and "lease.ttl (30 s)" in both


def test_a_config_file_of_comments_only_is_reported_as_empty(tmp_path: Path) -> None:
    """A YAML file holding only comments (or a bare ``---``) said ``expected a mapping at the top level,
    got NoneType``: no fix, and not what the docs promise for an empty file."""
    path = tmp_path / "watermark.yaml"
    for text in ("# pools: come later\n", "---\n", "--- # nothing yet\n...\n"):
        path.write_text(text)
        with pytest.raises(ConfigError, match=r"watermark\.yaml: the file is empty; it needs"):
            load_config(path)
    json_path = tmp_path / "watermark.json"  # unchanged: empty, and broken JSON
    json_path.write_text(" \n")
    with pytest.raises(ConfigError, match="the file is empty"):
        load_config(json_path)
    json_path.write_text("{")
    with pytest.raises(ConfigError, match="not valid JSON/YAML"):
        load_config(json_path)


# -- configuration --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("source", "key"),
    [
        ({"type": "kubernetes", "airflow_pod_labels": "airflow-worker"}, "airflow_pod_labels"),
        (
            {"type": "prometheus", "url": "http://p:9090", "airflow_namespaces": "airflow"},
            "airflow_namespaces",
        ),
    ],
)
def test_a_string_instead_of_a_list_is_a_config_error(source: dict[str, Any], key: str) -> None:
    config = parse_config({"pools": {"gpu_a": {"source": source}}})
    with pytest.raises(ConfigError, match=rf"pools\.gpu_a\.source: {key} must be a list"):
        build_sources(config.pools)


def test_bad_headers_error_does_not_show_their_values() -> None:
    headers = {"Authorization": "Bearer s3cr3t-token", "X-Retries": 3}
    with pytest.raises(
        ConfigError, match=r"headers: .*a non-text entry among \['Authorization', 'X-Retries'\]"
    ) as caught:
        parse_config(
            {"pools": {"gpu_a": {"source": {"type": "prometheus", "url": "http://p", "headers": headers}}}}
        )
    assert "s3cr3t" not in str(caught.value)


@pytest.mark.usefixtures("_own_lease_dir")
def test_a_trickling_prometheus_ends_its_read_within_the_source_timeout() -> None:
    # the tracker's worker thread ends with the read: the next tick reads again instead of finding it hung
    spec = PoolSpec("gpu", SourceSpec("prometheus", {}), floor=1, stale_intervals=0, source_timeout=10.0)
    with TrickleServer() as server:
        tracker = CapacityTracker(spec, PrometheusSource(server.url, timeout=1.0))
        started = time.monotonic()
        first = tracker.read()
        assert time.monotonic() - started < 1.0 + 3.0
        assert first.status == "floor" and "ReadTimeout" in first.detail
        second = tracker.read()
        assert "ReadTimeout" in second.detail and "still hung" not in second.detail


# -- direct tests of the config module: boundaries, helpers, files ----------------------------------------
ONE_POOL: dict[str, Any] = {"g": {"source": 2}}


@pytest.mark.parametrize(
    ("raw", "ok"),
    [
        ({"pools": ONE_POOL, "interval": "1d"}, True),
        ({"pools": ONE_POOL, "interval": 86401}, False),
        ({"pools": {"g": {"source": 1_000_000}}}, True),
        ({"pools": {"g": {"source": 1_000_001}}}, False),
        ({"pools": {"g": {"source": 2, "source_timeout": "24h"}}}, True),
        ({"pools": {"g": {"source": 2, "source_timeout": 86401}}}, False),
        ({"pools": ONE_POOL, "interval": "1d", "fail_open_after": 30}, True),  # exactly 30 days
        ({"pools": ONE_POOL, "interval": "1d", "fail_open_after": 31}, False),
        ({"pools": ONE_POOL, "interval": 60, "lease": {"ttl": "30d"}}, True),
        ({"pools": ONE_POOL, "interval": 60, "lease": {"ttl": 2_592_001}}, False),
        ({"pools": ONE_POOL, "interval": 60, "lease": {"ttl": 60}}, False),  # not longer than the interval
        ({"pools": ONE_POOL, "interval": 60, "lease": {"ttl": 60.5}}, True),
        ({"pools": {"g" * 256: {"source": 2}}}, True),
        ({"pools": {"g" * 257: {"source": 2}}}, False),
        ({"pools": {"g": {"source": {"type": "nvml", "max_utilization": 100}}}}, True),
        ({"pools": {"g": {"source": {"type": "nvml", "max_utilization": 101}}}}, False),
    ],
)
def test_limits_are_inclusive_and_one_past_them_is_refused(raw: dict[str, Any], ok: bool) -> None:
    if ok:
        parse_config(raw)
    else:
        with pytest.raises(ConfigError):
            parse_config(raw)


def test_the_lease_group_is_the_variable_else_the_hosts_lock_file_else_the_host() -> None:
    def group(lease: dict[str, Any]) -> str:
        return parse_config({"pools": ONE_POOL, "lease": lease}).lease_group("h1")

    assert group({"variable": "team_a", "lock_file": "/x.lock"}) == "variable:team_a"
    assert group({"variable": None, "lock_file": "/x.lock"}) == "lock:h1:/x.lock"
    assert group({"variable": None, "lock_file": None}) == "host:h1"


def test_with_interval_gives_a_new_config_whose_default_lease_follows_the_interval() -> None:
    from airflow_gpu_dag.watermark.config import with_interval

    config = parse_config({"pools": ONE_POOL, "interval": 60})
    faster = with_interval(config, 10)
    assert (faster.interval, faster.lease_ttl(), faster.fail_open_window()) == (10.0, 30.0, 30.0)
    assert (config.interval, config.lease_ttl()) == (60.0, 180.0)  # the original is left as it was


@pytest.mark.parametrize(
    ("interval", "message"),
    [
        (0, "interval: expected seconds > 0"),
        (-5, "interval: expected seconds > 0"),
        (float("nan"), "interval: expected seconds > 0"),
        (float("inf"), "interval: at most 1 day"),
        (86401, "interval: at most 1 day"),
    ],
)
def test_with_interval_refuses_what_the_files_interval_may_not_be(interval: float, message: str) -> None:
    from airflow_gpu_dag.watermark.config import with_interval

    with pytest.raises(ConfigError, match=message):
        with_interval(parse_config({"pools": ONE_POOL}), interval)


def test_with_interval_refuses_an_interval_that_makes_fail_open_after_exceed_30_days() -> None:
    from airflow_gpu_dag.watermark.config import with_interval

    config = parse_config({"pools": ONE_POOL, "interval": 60, "fail_open_after": 40})
    with pytest.raises(ConfigError, match="fail_open_after: 40 intervals of 86400 s is more than 30 days"):
        with_interval(config, 86400)


@pytest.mark.parametrize(
    ("interval", "timeouts"),
    [(10, [30]), (7, [30.5, 12]), (60, ["1h"]), (0.5, [2, 2, 2])],
)
def test_the_fixes_the_risk_warning_names_remove_the_risk(interval: float, timeouts: list[Any]) -> None:
    """The warning gives numbers to set; set them, and it has nothing left to say."""
    pools = {f"g{i}": {"source": 2, "source_timeout": t} for i, t in enumerate(timeouts)}
    raw: dict[str, Any] = {"interval": interval, "pools": pools}
    risk = parse_config(raw).fail_open_risk()
    assert risk is not None
    fail_open = re.search(r"raise fail_open_after to (\d+)", risk)
    ttl = re.search(r"set lease.ttl to (\S+)s,", risk)
    assert fail_open and ttl, risk
    fixed = {**raw, "fail_open_after": int(fail_open.group(1)), "lease": {"ttl": float(ttl.group(1))}}
    assert parse_config(fixed).fail_open_risk() is None


def test_the_default_config_carries_no_risk_and_sums_its_sources_timeouts() -> None:
    config = parse_config({"pools": {"a": {"source": 2}, "b": {"source": 2, "source_timeout": "45s"}}})
    assert config.source_wait() == 75.0 and config.fail_open_window() == 180.0
    assert config.lease_ttl() == 180.0 and config.fail_open_risk() is None  # 180 s > 60 + 75
    slow = parse_config({"pools": {"a": {"source": 2, "source_timeout": "2m"}}})  # 180 s <= 60 + 120
    assert slow.fail_open_risk() is not None


def test_parsing_leaves_the_document_as_it_was() -> None:
    """A caller may parse one document twice (a reload, a dry run then a run)."""
    raw: dict[str, Any] = {
        "interval": "30s",
        "lease": {"lock_file": None, "variable": "v", "ttl": "2m"},
        "pools": {
            "a": {"source": {"type": "nvml", "devices": ["0", 1], "min_free_memory": "40GiB"}, "floor": "1"},
            "b": {"source": " nvml ", "backfill": "strict"},
            "c": {"source": {"type": "file", "path": "/x", "max_age": "5m"}},
        },
    }
    before = copy.deepcopy(raw)
    first = parse_config(raw)
    assert raw == before and parse_config(raw) == first
    assert dict(first.pools[0].source.options) == {"devices": [0, 1], "min_free_memory": 40960}
    assert first.pools[2].source.options == {"path": "/x", "max_age": 300.0}


@pytest.mark.parametrize(
    ("backfill", "flags"), [(True, (True, False)), ("strict", (True, True)), (False, (False, False))]
)
def test_backfill_true_strict_or_false(backfill: Any, flags: tuple[bool, bool]) -> None:
    (pool,) = parse_config({"pools": {"g": {"source": 2, "backfill": backfill}}}).pools
    assert (pool.backfill, pool.strict_backfill) == flags


def test_a_file_sources_max_age_may_be_null_meaning_no_limit() -> None:
    (pool,) = parse_config(
        {"pools": {"g": {"source": {"type": "file", "path": "/x", "max_age": None}}}}
    ).pools
    assert pool.source.options == {"path": "/x", "max_age": None}


def test_a_pool_without_settings_says_it_needs_a_source() -> None:
    with pytest.raises(ConfigError, match=r"pools.g: expected a mapping with a 'source', got None"):
        parse_config({"pools": {"g": None}})


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("nested.yaml", "pools:\n  gpu:\n    source: {type: static, gpus: 2, gpus: 4}\n"),
        ("nested.json", '{"pools": {"gpu": {"source": 2, "floor": 0, "floor": 1}}}'),
        ("lease.yaml", "lease:\n  ttl: 90\n  ttl: 120\npools:\n  gpu: {source: 2}\n"),
    ],
)
def test_a_key_given_twice_deep_inside_the_file_is_refused(tmp_path: Path, name: str, text: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(
        ConfigError, match=rf"watermark config {re.escape(str(path))}: key '\w+' is given twice"
    ):
        load_config(path)


def test_several_yaml_documents_in_one_file_are_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "wm.yaml"
    path.write_text("pools:\n  a: {source: 2}\n---\npools:\n  b: {source: 3}\n")
    with pytest.raises(ConfigError, match=rf"watermark config {re.escape(str(path))}: not valid JSON/YAML"):
        load_config(path)


def test_a_directory_given_as_the_config_file_is_an_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=rf"watermark config {re.escape(str(tmp_path))}: cannot read it"):
        load_config(tmp_path)


def test_unicode_pool_names_and_a_byte_order_mark_load_from_yaml(tmp_path: Path) -> None:
    path = tmp_path / "wm.yaml"
    path.write_bytes("\ufeffpools:\n  gpu_ü/ñ: {source: 2}\n  7: {source: 1}\n".encode())
    assert [p.name for p in load_config(str(path)).pools] == ["gpu_ü/ñ", "7"]


def test_a_bad_gpu_dag_pools_option_is_named_when_no_file_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__GPU_DAG__POOLS", "{not json")
    with pytest.raises(ConfigError, match=r"no watermark config: \[gpu_dag\] pools .*pass --config FILE"):
        load_config(None)
    monkeypatch.delenv("AIRFLOW__GPU_DAG__POOLS")
    with pytest.raises(ConfigError, match=r"pass --config FILE .* or set \[gpu_dag\] pools"):
        load_config(None)


def test_gpu_dag_pools_over_the_slot_limit_are_reported_as_the_option(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without ``--config`` there is no file, yet the error names ``pools.gpu.source (static GPU count)``,
    a key of a file the user does not have, and neither ``[gpu_dag] pools`` nor the fix."""
    monkeypatch.setenv("AIRFLOW__GPU_DAG__POOLS", '{"gpu": 2000000}')
    with pytest.raises(ConfigError, match=r"\[gpu_dag\] pools"):
        load_config(None)
