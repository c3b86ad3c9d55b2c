"""The task contract (airflow_gpu_dag/contract.py): one typed, versioned form of what a task declares and
of what the provider derives, validated once by the cluster policy and read by the scheduler.

What a team sharing a GPU pool relies on: no DAG file can write the figures that order every DAG's
tasks (the parse-time remaining time, the run's GPU work), a typo in a hint is an import error that says
what was meant, and no DAG, mapped tasks included, is analysed inside the scheduler loop.
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.exceptions import AirflowClusterPolicyViolation
from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG, task
from airflow.serialization.serialized_objects import DagSerialization

from airflow_gpu_dag import CRITICAL_PATH_WEIGHT_RULE, PACKING_WEIGHT_RULE, gpu_hints
from airflow_gpu_dag.airflow import parse_time
from airflow_gpu_dag.airflow.policy import dag_policy
from airflow_gpu_dag.core.model.resources import GpuRequest
from airflow_gpu_dag.priority_strategy import CriticalPathPriorityStrategy, PackingPriorityStrategy

RUN_ID = "manual__2026-11-30T12:00:00+00:00"
STRATEGIES = (CriticalPathPriorityStrategy, PackingPriorityStrategy)
#: A year of "remaining time": the version-1 figures, and the same in the contract's ``derived``.
FORGED = {"remaining_s": 3e7, "slot_seconds": {}, "version": ""}
FORGED_DERIVED = {"remaining_s": 3e7, "slot_seconds": {}, "digest": "0" * 32}


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("AIRFLOW__GPU_DAG__POOLS", '{"gpu_default": 8}')
    monkeypatch.setenv("AIRFLOW__GPU_DAG__LEARNED_DURATIONS", "false")
    monkeypatch.setenv("AIRFLOW__GPU_DAG__PLAN_IN_BACKGROUND", "false")
    for cls in STRATEGIES:
        cls._weights.reset()
        cls._failed.clear()
    yield
    for cls in STRATEGIES:
        cls._weights.reset()
        cls._failed.clear()


def _serialized(dag: DAG) -> Any:
    return DagSerialization.from_dict(DagSerialization.to_dict(dag))


def _weight(sdag: Any, task_id: str, strategy: Any = None, map_index: int = -1, **extra: Any) -> int:
    ti = SimpleNamespace(
        task=sdag.task_dict[task_id],
        task_id=task_id,
        dag_id=sdag.dag_id,
        run_id=RUN_ID,
        map_index=map_index,
        **extra,
    )
    return int((strategy or CriticalPathPriorityStrategy()).get_weight(ti))


def _training(forged: dict[str, Any] | None, dag_id: str = "pretrain", mapped: bool = True) -> DAG:
    """The issue's DAG: a 4-GPU, 250-hour training and one mapped evaluation; ``forged`` goes into the
    training task's executor_config (the version-1 key, or the contract's ``derived``)."""
    with DAG(dag_id, schedule=None, default_args={"weight_rule": CRITICAL_PATH_WEIGHT_RULE}) as dag:
        config = gpu_hints(duration="250h", gpus=4)
        if forged is not None:
            config = {**config, **forged}
        train = BashOperator(
            task_id="train", bash_command="true", pool="gpu_default", pool_slots=4, executor_config=config
        )
        if mapped:

            @task(executor_config=gpu_hints(duration="20m"))
            def shard(x: int) -> int:
                return x

            train >> shard.expand(x=[1, 2, 3])
    return dag


def _evaluation(dag_id: str = "evaluate") -> DAG:
    with DAG(dag_id, schedule=None, default_args={"weight_rule": CRITICAL_PATH_WEIGHT_RULE}) as dag:
        BashOperator(
            task_id="eval",
            bash_command="true",
            pool="gpu_default",
            pool_slots=1,
            executor_config=gpu_hints(duration="10m", gpus=1),
        )
    return dag


# -- item 1: a forged derived key has no effect ------------------------------------------------------


@pytest.mark.parametrize(
    "forged",
    [
        {"gpu_dag_critical_path": FORGED},  # the key of contract version 1
        {"gpu_dag": {**gpu_hints(duration="250h", gpus=4)["gpu_dag"], "derived": FORGED_DERIVED}},
    ],
    ids=["legacy-key", "derived"],
)
@pytest.mark.parametrize("mapped", [True, False], ids=["mapped", "plain"])
def test_a_forged_parse_time_key_does_not_jump_the_queue(forged: dict[str, Any], mapped: bool) -> None:
    """A 250-hour training that writes its own 'remaining time' of a year into its executor_config
    must not go ahead of a 10-minute evaluation triggered at the same moment: the cluster policy
    writes the derived figures itself, for every DAG, mapped or not."""
    honest, forger = _training(None, mapped=mapped), _training(forged, mapped=mapped)
    for dag in (honest, forger, evaluation := _evaluation()):
        dag_policy(dag)
    honest_weight = _weight(_serialized(honest), "train")
    CriticalPathPriorityStrategy._weights.reset()
    forged_weight = _weight(_serialized(forger), "train")
    assert forged_weight == honest_weight
    assert forged_weight < _weight(_serialized(evaluation), "eval")  # the evaluation starts first
    config = _serialized(forger).task_dict["train"].executor_config
    assert "gpu_dag_critical_path" not in config
    assert config["gpu_dag"]["derived"]["remaining_s"] < 3e7


def test_derived_figures_written_without_the_policy_are_ignored(caplog: pytest.LogCaptureFixture) -> None:
    """A DAG parsed where the provider's policy does not run keeps what its file wrote; the scheduler
    uses derived figures only when their digest is the DAG's own."""
    forger = _training(
        {"gpu_dag": {**gpu_hints(duration="250h", gpus=4)["gpu_dag"], "derived": FORGED_DERIVED}},
        mapped=False,
    )
    weight = _weight(_serialized(forger), "train")
    CriticalPathPriorityStrategy._weights.reset()
    clean = _weight(_serialized(_training(None, mapped=False)), "train")  # analysed by the scheduler
    assert weight == clean
    assert "not this DAG version's" in caplog.text


def test_figures_of_another_version_are_ignored() -> None:
    """Figures copied from another version (a longer estimate) do not match the DAG they are in."""
    short, long = _training(None, "copy", mapped=False), _training(None, "copy", mapped=False)
    long.task_dict["train"].executor_config = gpu_hints(duration="300h", gpus=4)
    dag_policy(short)
    dag_policy(long)
    copied = DagSerialization.to_dict(short)
    figures = DagSerialization.to_dict(long)
    train = next(t for t in copied["dag"]["tasks"] if t["__var"]["task_id"] == "train")
    source = next(t for t in figures["dag"]["tasks"] if t["__var"]["task_id"] == "train")
    derived = source["__var"]["executor_config"]["__var"]["gpu_dag"]["__var"]["derived"]
    train["__var"]["executor_config"]["__var"]["gpu_dag"]["__var"]["derived"] = derived
    tampered = DagSerialization.from_dict(copied)
    expected = _weight(_serialized(short), "train")
    CriticalPathPriorityStrategy._weights.reset()
    assert _weight(tampered, "train") == expected


# -- item 5: mapped DAGs get their figures at parse time too -------------------------------------------


@pytest.mark.parametrize("rule", [CRITICAL_PATH_WEIGHT_RULE, PACKING_WEIGHT_RULE])
def test_a_dag_with_mapped_tasks_gets_derived_figures_equal_to_the_analysis(rule: str) -> None:
    def dag_of() -> DAG:
        with DAG("sweep", schedule=None, default_args={"weight_rule": rule}) as dag:
            prep = BashOperator(
                task_id="prep", bash_command="true", executor_config=gpu_hints(duration="10m")
            )

            @task(executor_config=gpu_hints(duration="1h", gpus=1), pool="gpu_default")
            def trial(lr: float) -> float:
                return lr

            @task(
                executor_config=gpu_hints(duration="30m", gpus=2, map_length=4),
                pool="gpu_default",
                pool_slots=2,
            )
            def train(x: int) -> int:
                return x

            @task(executor_config=gpu_hints(duration="5m"))
            def pick(scores: Any) -> None:
                return None

            trials = trial.expand(lr=[0.1, 0.01, 0.001])
            prep >> trials
            pick(train.expand(x=trials))
        return dag

    strategy = (
        CriticalPathPriorityStrategy() if rule == CRITICAL_PATH_WEIGHT_RULE else PackingPriorityStrategy()
    )
    annotated = dag_of()
    dag_policy(annotated)
    sdag = _serialized(annotated)
    assert all(parse_time.read(t) is not None for t in sdag.task_dict.values())
    cases = [("prep", -1), ("trial", 0), ("trial", 2), ("train", 3), ("pick", -1)]
    with_figures = {case: _weight(sdag, case[0], strategy, case[1]) for case in cases}
    type(strategy)._weights.reset()
    analysed = _serialized(dag_of())  # no policy: analysed by the scheduler
    assert {case: _weight(analysed, case[0], strategy, case[1]) for case in cases} == with_figures
    remaining = {t: parse_time.read(sdag.task_dict[t]).remaining for t in ("prep", "trial", "train")}  # type: ignore[union-attr]
    assert remaining == {"prep": (10 + 60 + 30 + 5) * 60, "trial": (60 + 30 + 5) * 60, "train": (30 + 5) * 60}
    # 3 trials of 1 GPU-hour, 4 trainings of 2 GPUs for 30 minutes
    assert parse_time.read(sdag.task_dict["pick"]).slot_seconds["gpu_default"] == 3 * 3600 + 4 * 2 * 1800  # type: ignore[union-attr]


def test_the_first_weights_of_a_mapped_dag_are_not_analysed_in_the_scheduler_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Neither the first object of a new version nor a new object of the same version is analysed in
    the calling thread: the analysis runs once, in the background thread."""
    import airflow_gpu_dag.priority.weights as weights_module

    monkeypatch.setenv("AIRFLOW__GPU_DAG__PLAN_IN_BACKGROUND", "true")
    analysed_in: list[str] = []
    build = weights_module.build_basis

    def recording(*args: Any, **kwargs: Any) -> Any:
        analysed_in.append(threading.current_thread().name)
        return build(*args, **kwargs)

    monkeypatch.setattr(weights_module, "build_basis", recording)
    dag = _training(None)
    dag_policy(dag)
    data = DagSerialization.to_dict(dag)
    first = DagSerialization.from_dict(data)
    weights = {t: _weight(first, t, dag_version_id="v1") for t in first.task_dict}
    assert threading.current_thread().name not in analysed_in  # the policy's figures; analysed off the loop
    background = CriticalPathPriorityStrategy._weights.background
    assert background is not None and background.wait_idle(60)
    assert analysed_in == ["gpu-dag-weights"]
    second = DagSerialization.from_dict(data)  # a new object of the same version (an api-server request)
    assert {t: _weight(second, t, dag_version_id="v1") for t in second.task_dict} == weights
    assert analysed_in == ["gpu-dag-weights"]  # shared, not analysed again


def test_the_digest_is_the_same_before_and_after_serialization() -> None:
    dag = _training(None)
    dag_policy(dag)
    sdag = _serialized(dag)
    digest = parse_time.version_digest(sdag)
    assert digest == parse_time.version_digest(dag)
    assert {parse_time.read(t).version for t in sdag.task_dict.values()} == {digest}  # type: ignore[union-attr]


# -- one contract: unknown keys, the wire form, the schema, old serialized DAGs -----------------------


def test_an_unknown_key_is_refused_at_parse_time_with_a_did_you_mean(tmp_path: Path) -> None:
    from airflow.dag_processing.dagbag import DagBag

    path = tmp_path / "typo.py"
    path.write_text(
        "from airflow.sdk import DAG\n"
        "from airflow.providers.standard.operators.bash import BashOperator\n"
        f"with DAG('typo', schedule=None, default_args={{'weight_rule': {CRITICAL_PATH_WEIGHT_RULE!r}}}):\n"
        "    BashOperator(task_id='train', bash_command='true', pool='gpu_default',\n"
        "                 executor_config={'gpu_dag': {'duration': '1h', 'gpus': 1, 'gpu_mem': '40GiB'}})\n"
    )
    errors = list(DagBag(dag_folder=str(path)).import_errors.values())
    assert len(errors) == 1, errors
    assert "DAG 'typo', task 'train'" in errors[0]
    assert "unknown key 'gpu_mem'" in errors[0] and "did you mean 'gpu_memory'?" in errors[0]


def test_the_contract_survives_serialization_and_reads_back_equal() -> None:
    from airflow_gpu_dag import contract

    dag = _training(None)
    dag_policy(dag)
    sdag = _serialized(dag)
    for task_id, original in dag.task_dict.items():
        before = contract.read(original.executor_config)
        after = contract.read(sdag.task_dict[task_id].executor_config)
        assert before == after and before.derived is not None and not after.problems
        assert sdag.task_dict[task_id].executor_config["gpu_dag"]["v"] == contract.CONTRACT_VERSION
    assert contract.read(sdag.task_dict["train"].executor_config).gpu_request.count == 4  # type: ignore[union-attr]


def test_an_old_format_executor_config_is_read_and_rewritten_at_the_next_parse() -> None:
    """A DAG serialized before the contract was versioned: its hints read as they are; its parse-time
    figures (the version-1 key) are not trusted; the policy writes the current form."""
    from airflow_gpu_dag import contract

    old = {"gpu_dag": {"duration_s": 3600.0, "gpus": 2}, "gpu_dag_critical_path": FORGED}
    read = contract.read(old)
    assert (read.version, read.duration_s, read.gpus, read.derived, read.problems) == (1, 3600.0, 2, None, ())
    with DAG("old", schedule=None, default_args={"weight_rule": CRITICAL_PATH_WEIGHT_RULE}) as dag:
        BashOperator(task_id="t", bash_command="true", pool="gpu_default", pool_slots=2, executor_config=old)
    assert parse_time.read(_serialized(dag).task_dict["t"]) is None  # the scheduler analyses it
    dag_policy(dag)
    config = dag.task_dict["t"].executor_config
    assert set(config) == {"gpu_dag"} and config["gpu_dag"]["v"] == contract.CONTRACT_VERSION


def test_the_docs_render_the_generated_schema() -> None:
    from airflow_gpu_dag import contract

    text = (Path(__file__).resolve().parents[2] / "docs" / "task-contract.md").read_text()
    block = re.search(r"<!-- schema -->\s*```json\n(.*?)```", text, re.S)
    assert block, "docs/task-contract.md has no ```json block after <!-- schema -->"
    assert json.loads(block.group(1)) == contract.json_schema(), (
        "regenerate it: .venv/bin/python -m airflow_gpu_dag.contract"
    )


def test_the_wire_form_validates_against_the_schema_and_parses_back() -> None:
    import jsonschema

    from airflow_gpu_dag import contract

    raw = {
        "duration": "1h30m",
        "gpus": "2",
        "gpu_memory": "40GiB",
        "gpu_type": "A100",
        "inputs": "/lake/raw",
        "outputs": ["/lake/a", "/lake/b"],
        "map_length": 3,
        "fallback": {
            "ladder": "l",
            "rung": "r",
            "index": 0,
            "rungs": 2,
            "start_within_s": 60,
            "watched": True,
        },
        "window": {"opens": "22:00", "closes": "06:00", "tz": "UTC", "on_missed": "fail"},
    }
    parsed = contract.parse(raw)
    wire = parsed.to_wire()
    jsonschema.validate(wire, contract.json_schema())
    assert contract.parse(wire) == parsed
    assert (parsed.duration_s, parsed.gpu_request) == (5400.0, GpuRequest(2, 40960, "a100"))
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**wire, "gpu_mem": 1}, contract.json_schema())


@pytest.mark.parametrize(
    ("raw", "key", "expected"),
    [
        ({"gpu_mem": 1}, "gpu_mem", "did you mean 'gpu_memory'?"),
        ({"durration": "1h"}, "durration", "did you mean 'duration'?"),
        ({"inputs": ["/a", 5]}, "inputs", "must be a list of dataset paths"),
        ({"gpus": 1, "fallback": {"index": 0, "of": 2}}, "of", "unknown key 'of'"),
        ({"gpu_memory_mib": 4096}, "gpu_memory_mib", "without gpus"),
        ({"duration": "1h", "duration_s": 60}, "duration_s", "twice"),
        ({"v": 99}, "v", "newer than this airflow-gpu-dag reads"),
        ({"window": {"opens": "22:00"}}, "window", "no window"),
        ({"derived": {"remaining_s": -1, "slot_seconds": {}, "digest": ""}}, "derived", "malformed"),
    ],
)
def test_malformed_contracts_name_the_key_and_the_fix(raw: dict[str, Any], key: str, expected: str) -> None:
    from airflow_gpu_dag import contract

    with pytest.raises(contract.ContractError) as caught:
        contract.parse(raw)
    assert [p.key for p in caught.value.problems][:1] == [key]
    assert expected in str(caught.value) and "Fix:" in str(caught.value)
    assert contract.read({"gpu_dag": raw}).problems == caught.value.problems  # the reader: same problems


# -- item 8: fuzzed, not only enumerated ---------------------------------------------------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from airflow_gpu_dag import contract as contract_module  # noqa: E402
from airflow_gpu_dag.core.analysis.weight_rules import INT32_MAX, INT32_MIN  # noqa: E402

#: Anything JSON-like (and a little beyond: huge ints, NaN, tuples) a hand-written executor_config holds.
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.sampled_from([0, 1, 2, 8, -1, 2**31, 2**63, 10**400, -(2**5000)]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=10),
    st.sampled_from(["30m", "1h30m", "-5m", "80GiB", "a100", "22:00", "skip", "", "nan"]),
)
VALUES = st.recursive(
    SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.tuples(children),
        st.dictionaries(st.text(max_size=8), children, max_size=3),
    ),
    max_leaves=8,
)
#: Keys of the contract, its aliases, near misses and anything else.
KEYS = st.one_of(
    st.sampled_from([*contract_module.json_schema()["properties"], "gpu_mem", "durations", "gpu", "fallbak"]),
    st.text(max_size=8),
)
SUB_KEYS = st.sampled_from(
    ["opens", "closes", "tz", "fixed", "templated", "on_missed", "index", "rungs", "assumed_index",
     "start_within_s", "watched", "ladder", "rung", "remaining_s", "slot_seconds", "digest", "of"]
)  # fmt: skip
RAW = st.one_of(
    VALUES,
    st.dictionaries(KEYS, st.one_of(VALUES, st.dictionaries(SUB_KEYS, VALUES, max_size=4)), max_size=6),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=RAW)
def test_the_parser_only_ever_refuses_with_the_documented_error(raw: Any) -> None:
    """``parse`` returns a contract or raises ContractError naming each problem and its fix; ``read``
    never raises and lists the same problems; what parses writes a wire form that matches the schema and
    parses back to the same contract."""
    import jsonschema

    try:
        parsed = contract_module.parse(raw)
    except contract_module.ContractError as err:
        assert err.problems and all(p.fix and p.message for p in err.problems)
        assert "Fix:" in str(err)
        assert contract_module.read({"gpu_dag": raw}).problems == err.problems
        return
    assert contract_module.read({"gpu_dag": raw}) == parsed
    wire = parsed.to_wire()
    jsonschema.validate(wire, contract_module.json_schema())
    assert contract_module.parse(json.loads(json.dumps(wire))) == parsed  # JSON types only, a fixed point


def _small_dag(dag_id: str, configs: list[Any], mapped: bool) -> DAG:
    """A chain of BashOperators with these executor_configs; the last one mapped over two values."""
    with DAG(dag_id, schedule=None, default_args={"weight_rule": CRITICAL_PATH_WEIGHT_RULE}) as dag:
        previous = None
        for i, config in enumerate(configs):
            hints = config.get("gpu_dag") if isinstance(config, dict) else None
            gpus = hints.get("gpus") if isinstance(hints, dict) else None
            slots = gpus if isinstance(gpus, int) and not isinstance(gpus, bool) and 1 <= gpus <= 8 else 1
            kwargs = {
                "task_id": f"t{i}",
                "executor_config": config,
                "pool": "gpu_default",
                "pool_slots": slots,
            }
            if mapped and i == len(configs) - 1:
                task_ = BashOperator.partial(**kwargs).expand(bash_command=["true", "false"])
            else:
                task_ = BashOperator(bash_command="true", **kwargs)
            if previous is not None:
                previous >> task_
            previous = task_
    return dag


GOOD = st.builds(
    lambda d, g: gpu_hints(duration=d, gpus=g),
    st.integers(0, 36_000),
    st.one_of(st.none(), st.integers(1, 4)),
)
FORGERY = st.one_of(
    st.fixed_dictionaries({"gpu_dag_critical_path": VALUES}),
    st.fixed_dictionaries({"derived": VALUES}),
    st.fixed_dictionaries(
        {"derived": st.fixed_dictionaries(
            {"remaining_s": st.floats(0, 1e9), "slot_seconds": st.just({}), "digest": st.text(max_size=32)}
        )}
    ),
)  # fmt: skip


def _forge(config: dict[str, Any], forgery: dict[str, Any]) -> dict[str, Any]:
    forged = {**config, **{k: v for k, v in forgery.items() if k != "derived"}}
    if "derived" in forgery:
        forged["gpu_dag"] = {**config.get("gpu_dag", {}), "derived": forgery["derived"]}
    return forged


def _all_weights(sdag: Any) -> dict[tuple[str, int], int]:
    out = {}
    for cls in STRATEGIES:
        for task_id in sdag.task_dict:
            for map_index in (-1, 0, 1):
                weight = _weight(sdag, task_id, cls(), map_index)
                assert type(weight) is int and INT32_MIN <= weight <= INT32_MAX
                out[(cls.__name__, task_id, map_index)] = weight
        assert not cls._failed, f"{cls.__name__}.get_weight fell back (a swallowed crash) for {cls._failed}"
    return out  # type: ignore[return-value]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    configs=st.lists(
        st.one_of(st.none(), st.fixed_dictionaries({"gpu_dag": RAW}), GOOD), min_size=1, max_size=4
    ),
    mapped=st.booleans(),
)
def test_any_executor_config_fails_the_import_clearly_and_never_breaks_get_weight(
    configs: list[Any], mapped: bool
) -> None:
    dag = _small_dag("fuzzed", configs, mapped)
    try:
        dag_policy(dag)
    except AirflowClusterPolicyViolation as err:
        assert "DAG 'fuzzed'" in str(err) and "Fix:" in str(err)
        assert any(f"task '{t}'" in str(err) for t in dag.task_dict)
    else:
        sdag = _serialized(dag)
        digests = {parse_time.read(t).version for t in sdag.task_dict.values()}  # type: ignore[union-attr]
        assert digests == {parse_time.version_digest(sdag)}  # every task, mapped or not
    for cls in STRATEGIES:
        cls._weights.reset()
    _all_weights(_serialized(dag))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    configs=st.lists(GOOD, min_size=1, max_size=4),
    forgeries=st.lists(st.one_of(st.none(), FORGERY), min_size=4, max_size=4),
    mapped=st.booleans(),
)
def test_derived_figures_a_dag_file_writes_change_no_weight(
    configs: list[dict[str, Any]], forgeries: list[Any], mapped: bool
) -> None:
    forged = [c if f is None else _forge(c, f) for c, f in zip(configs, forgeries, strict=False)]
    honest, forger = _small_dag("same", configs, mapped), _small_dag("same", forged, mapped)
    dag_policy(honest)
    dag_policy(forger)
    expected = _all_weights(_serialized(honest))
    for cls in STRATEGIES:
        cls._weights.reset()
    assert _all_weights(_serialized(forger)) == expected


def test_the_controller_reads_the_contract_it_gets_over_rest() -> None:
    """The controller gets executor_config as the REST API's ``str(dict)``: it reads the parsed
    contract, so a malformed GPU count (2.5) is no GPU request (the task's pool slots count), not 2."""
    from airflow_gpu_dag.executor_config import fallback_hint, map_length_hint
    from airflow_gpu_dag.watermark.own_gpus import gpus_of_task_instance

    malformed = {"executor_config": str({"gpu_dag": {"gpus": 2.5}}), "pool": "gpu_a100", "pool_slots": 3}
    assert gpus_of_task_instance(malformed) == 3
    rung = {"ladder": "train", "rung": "big", "index": 0, "rungs": 2, "start_within_s": 600, "watched": True}
    canonical = str(
        contract_module.parse({"gpus": 2, "map_length": 4, "fallback": rung}).to_executor_config()
    )
    assert gpus_of_task_instance({"executor_config": canonical, "pool": "gpu_a100"}) == 2
    assert map_length_hint(canonical) == 4
    assert fallback_hint(canonical) == {
        **rung,
        "start_within_s": 600.0,
        "assumed_index": 0,
        "assumed_rung": None,
    }


def test_lint_reports_derived_figures_a_dag_file_writes() -> None:
    from airflow_gpu_dag.airflow.policy import priority_findings

    forger = _training({"gpu_dag_critical_path": FORGED}, mapped=False)
    found = [f for f in priority_findings(forger) if f.code == "derived-hint"]
    assert [(f.task_id, f.is_error) for f in found] == [("train", False)]
    assert "gpu_dag_critical_path" in found[0].message and "remove them" in found[0].fix
