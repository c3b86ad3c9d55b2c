"""Bad input never crashes the watermark controller (#14.4): random and malformed configuration files,
task instances and pools read over REST (wrong types, NaN, huge numbers, unicode ids, garbage JSON,
missing fields, huge and endless pages). The config loader gives a clear error or a sane config; a
tick never raises and never decides a pool size outside ``[0, capacity]``."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_gpu_dag.hooks.rest_client import MAX_ITEMS, AirflowRestClient
from airflow_gpu_dag.pool_claim.state import parse_pool_state
from airflow_gpu_dag.watermark.config import ConfigError, load_config, parse_config
from airflow_gpu_dag.watermark.controller import WatermarkController
from airflow_gpu_dag.watermark.sources import SourceError, build_sources
from tests.unit.test_watermark_controller import NOW, FakeRest, Source, ti

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["30s", "2m", "-1s", "1h30m", "NaN", "inf", "8", "", "static", "strict", "💥"]),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
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
            values,
            st.fixed_dictionaries(
                {"type": st.sampled_from(["static", "file", "prometheus", "kubernetes", "nvml", "magic", 3])},
                optional={k: values for k in SOURCE_KEYS[1:] + MORE_SOURCE_KEYS},
            ),
        )
    )
    pool = draw(
        st.fixed_dictionaries({"source": st.just(source)}, optional={k: values for k in POOL_KEYS[1:]})
    )
    names = st.one_of(st.text(max_size=300), st.integers(), st.sampled_from(["gpu", "gpu_a100", "ü/ñ"]))
    doc = draw(
        st.fixed_dictionaries(
            {"pools": st.one_of(st.dictionaries(names, st.just(pool), min_size=1, max_size=3), values)},
            optional={
                "interval": values,
                "fail_open_after": values,
                "lease": st.one_of(
                    values, st.fixed_dictionaries({}, optional={"ttl": values, "variable": values})
                ),
            },
        )
    )
    return draw(st.one_of(st.just(doc), values))


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


@SETTINGS
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


@SETTINGS
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


@SETTINGS
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


# -- task instances and pools read over REST -----------------------------------------------------------------
NO_LEASE = {"lock_file": None, "variable": None}


def make(config: Any, rest: Any, gpus: int) -> WatermarkController:
    return WatermarkController(config, rest, {"gpu": Source(gpus)}, default_duration=60.0, clock=lambda: NOW)


ti_fields = {
    "dag_id": st.one_of(st.text(max_size=20), values),
    "dag_run_id": values,
    "task_id": st.one_of(st.text(max_size=30), values),
    "map_index": values,
    "state": st.sampled_from(["scheduled", "queued", "running", "deferred", None, "success", 7]),
    "pool": st.sampled_from(["gpu", "gpu", "other", None, 3]),
    "pool_slots": values,
    "priority_weight": values,
    "executor_config": st.one_of(
        values,
        st.builds(lambda d: str({"gpu_dag": {"duration_s": d}}), values),
        st.just("{'gpu_dag': {'duration_s': float('nan')}}"),
        st.just("__import__('os').system('false')"),
    ),
    "logical_date": values,
    "start_date": st.one_of(values, st.just("2026-11-30T00:00:00Z"), st.just("not a date")),
}
task_instances = st.lists(st.one_of(st.fixed_dictionaries({}, optional=ti_fields), values), max_size=25)
pool_bodies = st.one_of(
    st.none(),
    st.fixed_dictionaries(
        {},
        optional={
            "slots": values,
            "description": st.one_of(
                values,
                st.builds(lambda v: f"x [gpu-dag-state {json.dumps(v, default=str)}]", values),
                st.just('[gpu-dag-state {"last_good": 1e400, "failures": "many", "capacity": -1}]'),
            ),
            "include_deferred": values,
        },
    ),
)


class GarbageRest(FakeRest):
    def __init__(self, tis: list[Any], pool: Any) -> None:
        super().__init__()
        self.tis = tis
        self.pool = pool

    def get_pool(self, name: str) -> Any:
        return self.pools.get(name, self.pool)

    def task_instances(self, pools: Any, states: Any) -> list[Any]:
        return list(self.tis)

    def run_task_instances(self, dag_id: str, run_id: str) -> list[Any]:
        return list(self.tis)

    def upstream_task_ids(self, dag_id: str) -> dict[str, list[str]]:
        return {"t": ["u"]}


@SETTINGS
@given(task_instances, pool_bodies, st.integers(min_value=0, max_value=16), st.booleans())
def test_a_tick_never_raises_on_malformed_task_instances_or_pools(
    tis: list[Any], pool: Any, gpus: int, backfill: bool
) -> None:
    rest = GarbageRest(tis, pool)
    config = parse_config(
        {
            "pools": {"gpu": {"source": 0, "backfill": backfill}},
            "lease": {"lock_file": None, "variable": None},
        }
    )
    controller = WatermarkController(
        config, rest, {"gpu": Source(gpus)}, default_duration=60.0, clock=lambda: NOW
    )  # type: ignore[arg-type,dict-item]
    for _ in range(2):
        for outcome in controller.tick():
            assert outcome.size is None or 0 <= outcome.size <= outcome.capacity.gpus
    for name, slots in rest.writes:
        assert name == "gpu" and isinstance(slots, int) and 0 <= slots <= gpus
        state = parse_pool_state(rest.pools[name]["description"])
        assert state is not None and state.capacity == gpus


def test_ten_thousand_task_instances_in_one_answer() -> None:
    rest = FakeRest()
    rest.tis = [ti("hold", "running", started=NOW - 10, duration=100)] + [
        ti(f"t_{i}_ünï", "scheduled", slots=1 + i % 3, priority=i % 7) for i in range(10_000)
    ]
    config = parse_config({"pools": {"gpu": {"source": 0}}, "lease": {"lock_file": None, "variable": None}})
    controller = WatermarkController(
        config, rest, {"gpu": Source(8)}, default_duration=60.0, clock=lambda: NOW
    )  # type: ignore[arg-type]
    (outcome,) = controller.tick()
    assert outcome.error is None and outcome.size is not None and 0 <= outcome.size <= 8


# -- the REST client on a broken api-server ----------------------------------------------------------------
def _client(handler: Any) -> AirflowRestClient:
    return AirflowRestClient("http://api", token="t", transport=httpx.MockTransport(handler))


@pytest.mark.parametrize(
    "body",
    [
        b"<html>502 Bad Gateway</html>",
        b"[]",
        b'{"task_instances": "nope"}',
        b'{"task_instances": [1, "x", null, {"pool": "gpu", "state": "running", "pool_slots": 1e999}]}',
        b'{"slots": "NaN", "description": {"x": 1}}',
        b"",
    ],
)
def test_garbage_answers_cost_the_tick_not_the_loop(body: bytes) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=body, headers={"content-type": "application/json"})

    rest = _client(handler)
    config = parse_config({"pools": {"gpu": {"source": 0}}, "lease": {"lock_file": None, "variable": None}})
    controller = WatermarkController(
        config, rest, {"gpu": Source(4)}, default_duration=60.0, clock=lambda: NOW
    )  # type: ignore[dict-item]
    outcomes = controller.tick()
    assert [o.pool for o in outcomes] == ["gpu"]
    assert outcomes[0].size is None or 0 <= outcomes[0].size <= 4


def test_an_endless_list_is_refused() -> None:
    calls = {"n": 0}

    def handler(request: httpx.Request) -> httpx.Response:
        calls["n"] += 1
        page = [{"pool": "gpu", "state": "scheduled"}] * 100
        return httpx.Response(200, json={"task_instances": page, "total_entries": 10**12})

    rest = _client(handler)
    config = parse_config({"pools": {"gpu": {"source": 0}}, "lease": {"lock_file": None, "variable": None}})
    controller = WatermarkController(
        config, rest, {"gpu": Source(4)}, default_duration=60.0, clock=lambda: NOW
    )  # type: ignore[dict-item]
    (outcome,) = controller.tick()
    assert outcome.error is not None and f"more than {MAX_ITEMS} items" in outcome.error
    assert calls["n"] <= MAX_ITEMS // 100 + 5
