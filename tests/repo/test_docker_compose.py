"""docker/docker-compose.yaml: valid Compose (Compose Specification JSON schema) and consistent.

No Docker engine is needed: the file is validated with ``jsonschema`` against the schema stored in
``tests/fixtures/compose-spec/`` (origin and license in ORIGIN.md there), then checked for what
matters to this deployment: every Airflow service runs the image built from docker/Dockerfile,
all of them see the same metadata DB / secrets / executor, long-running services have
healthchecks, the GPU workers reserve NVIDIA devices and each serves its own queue."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


DOCKER = ROOT / "docker"


COMPOSE_FILE = DOCKER / "docker-compose.yaml"


SCHEMA_FILE = ROOT / "tests" / "fixtures" / "compose-spec" / "compose-spec.json"


#: Services that run the Airflow image (everything but the databases).
AIRFLOW_CORE_SERVICES = {
    "airflow-init",
    "airflow-api-server",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
    "airflow-watermark",
}


#: Environment keys every Airflow component must agree on.
SHARED_KEYS = (
    "AIRFLOW__CORE__EXECUTOR",
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN",
    "AIRFLOW__CORE__FERNET_KEY",
    "AIRFLOW__API_AUTH__JWT_SECRET",
    "AIRFLOW__API__SECRET_KEY",
    "AIRFLOW__CORE__EXECUTION_API_SERVER_URL",
    "AIRFLOW__CORE__AUTH_MANAGER",
    "AIRFLOW__CELERY__BROKER_URL",
    "AIRFLOW__CELERY__RESULT_BACKEND",
    "AIRFLOW__GPU_DAG__POOLS",
)


_VAR = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}")


def interpolate(value: str, env: dict[str, str]) -> str:
    """Compose-style ``${VAR}``, ``${VAR:-default}``, ``${VAR:?error}`` substitution (``$$`` -> ``$``)."""

    def repl(match: re.Match[str]) -> str:
        name, op, arg = match.group("name"), match.group("op"), match.group("arg")
        current = env.get(name)
        if op in (":-", "-"):
            return current if current else (arg or "")
        if op in (":?", "?"):
            if not current:
                raise KeyError(f"${{{name}}} is required: {arg}")
            return current
        return current or ""

    return _VAR.sub(repl, value.replace("$$", "\0")).replace("\0", "$")


def read_env_example() -> dict[str, str]:
    out: dict[str, str] = {}
    for line in (DOCKER / ".env.example").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip() or f"test-{key.strip().lower()}"
    return out


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE_FILE.read_text())
    assert isinstance(data, dict)
    return data


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    return dict(json.loads(SCHEMA_FILE.read_text()))


def airflow_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: svc for name, svc in compose["services"].items() if name.startswith("airflow-")}


def env_of(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    assert isinstance(env, dict), "use the mapping form of `environment` so anchors merge"
    return {str(k): str(v) for k, v in env.items()}


def load_watermark_config(svc: dict[str, Any]) -> Any:
    """The controller's config file, as mounted into the service, read by the provider's loader."""
    from airflow_gpu_dag.watermark.config import load_config

    path = svc["command"].split("--config ", 1)[1].split()[0]
    mount = next(v for v in svc["volumes"] if v.split(":")[1] == path)
    return load_config(DOCKER / mount.split(":")[0])


def parse_seconds(value: str) -> float:
    """A compose duration (``60s``, ``1m30s``) in seconds."""
    from airflow_gpu_dag.core.model.resources import parse_duration

    return parse_duration(value)


def test_schema_fixture_has_its_origin_noted() -> None:
    origin = (SCHEMA_FILE.parent / "ORIGIN.md").read_text()
    assert "github.com/compose-spec/compose-spec" in origin
    assert "Apache License 2.0" in origin


def test_compose_file_matches_the_compose_specification(
    compose: dict[str, Any], schema: dict[str, Any]
) -> None:
    validator = jsonschema.Draft7Validator(schema)
    errors = sorted(validator.iter_errors(compose), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors)


def test_schema_rejects_a_broken_compose_file(compose: dict[str, Any], schema: dict[str, Any]) -> None:
    """The validation above can fail: a misspelt key and a wrong type are both reported."""
    broken = copy.deepcopy(compose)
    broken["services"]["airflow-scheduler"]["deploy"] = {"resources": {"reservation": {}}}
    broken["services"]["postgres"]["restart"] = ["unless-stopped"]
    errors = list(jsonschema.Draft7Validator(schema).iter_errors(broken))
    assert len(errors) >= 2


def test_all_components_are_there(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) >= AIRFLOW_CORE_SERVICES
    assert {"postgres", "redis"} <= set(services)
    assert services["airflow-api-server"]["command"] == "api-server"
    assert services["airflow-scheduler"]["command"] == "scheduler"
    assert services["airflow-dag-processor"]["command"] == "dag-processor"
    assert services["airflow-triggerer"]["command"] == "triggerer"
    assert services["airflow-watermark"]["command"].startswith("gpu-dag watermark --config ")


def test_watermark_controller_config_matches_the_pools(compose: dict[str, Any]) -> None:
    """The controller's config parses with the provider's own loader, manages exactly the pools
    the init container creates, and the controller can reach the api-server as the admin."""
    svc = compose["services"]["airflow-watermark"]
    config = load_watermark_config(svc)
    pools = json.loads((DOCKER / "pools.json").read_text())
    by_name = {spec.name: spec for spec in config.pools}
    assert set(by_name) == set(pools)
    assert by_name["gpu_default"].source.type == "nvml"
    conn = interpolate(env_of(svc)["AIRFLOW_CONN_GPU_DAG_API"], read_env_example())
    assert conn == f"http://admin:{read_env_example()['AIRFLOW_ADMIN_PASSWORD']}@airflow-api-server:8080"
    assert svc["depends_on"]["airflow-api-server"]["condition"] == "service_healthy"


def test_watermark_healthcheck_reads_the_controllers_heartbeat(compose: dict[str, Any]) -> None:
    """The controller's healthcheck says it ticks (not that a pool exists): the command writes a
    heartbeat file and the check is ``airflow gpu-dag watermark-health`` on that same file."""
    from airflow_gpu_dag.cli.definition import get_parser

    svc = compose["services"]["airflow-watermark"]
    args = get_parser().parse_args(svc["command"].split())
    assert args.heartbeat_file and not args.once
    test = svc["healthcheck"]["test"]
    assert test[0] == "CMD" and test[1:4] == ["airflow", "gpu-dag", "watermark-health"]
    probe = get_parser().parse_args(test[2:])
    assert probe.heartbeat_file == args.heartbeat_file
    config = load_watermark_config(svc)
    # a healthcheck interval well above the staleness limit would only notice a hang late
    assert parse_seconds(svc["healthcheck"]["interval"]) <= 3 * config.interval


def test_every_airflow_service_runs_the_built_image(compose: dict[str, Any]) -> None:
    images = set()
    for name, svc in airflow_services(compose).items():
        images.add(svc["image"])
        build = svc.get("build")
        assert build, f"{name}: needs the build section (docker/Dockerfile) so `up --build` builds it"
        assert (DOCKER / build["context"] / build["dockerfile"]).resolve() == DOCKER / "Dockerfile", name
    assert len(images) == 1, f"all Airflow services must share one image, found {images}"
    (image,) = images
    assert "airflow-gpu-dag" in interpolate(image, {})
    for name in ("postgres", "redis"):
        assert "build" not in compose["services"][name]


def test_environment_is_consistent(compose: dict[str, Any]) -> None:
    services = airflow_services(compose)
    reference = env_of(services["airflow-scheduler"])
    for name, svc in services.items():
        env = env_of(svc)
        for key in SHARED_KEYS:
            assert env.get(key) == reference[key], f"{name}: {key} differs from the scheduler's"


def test_environment_points_at_the_services(compose: dict[str, Any]) -> None:
    services = compose["services"]
    values = read_env_example()
    env = {k: interpolate(v, values) for k, v in env_of(services["airflow-scheduler"]).items()}

    db = re.match(
        r"postgresql\+psycopg2://(\w+):([^@]+)@([\w.-]+):(\d+)/(\w+)$",
        env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"],
    )
    assert db, env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    pg_env = {k: interpolate(v, values) for k, v in services["postgres"]["environment"].items()}
    assert db.groups() == (
        pg_env["POSTGRES_USER"],
        pg_env["POSTGRES_PASSWORD"],
        "postgres",
        "5432",
        pg_env["POSTGRES_DB"],
    )

    api = re.match(r"http://([\w.-]+):(\d+)/execution/$", env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"])
    assert api and api.group(1) in services, env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"]
    assert api.group(1) == "airflow-api-server"
    assert any(str(p).endswith(f":{api.group(2)}") for p in services["airflow-api-server"]["ports"])

    broker = re.match(r"redis://:([^@]*)@([\w.-]+):6379/0$", env["AIRFLOW__CELERY__BROKER_URL"])
    assert broker and broker.group(2) == "redis"
    redis_env = {k: interpolate(v, values) for k, v in services["redis"]["environment"].items()}
    assert broker.group(1) == redis_env["REDIS_PASSWORD"]

    assert env["AIRFLOW__CORE__EXECUTOR"] == values["AIRFLOW_EXECUTOR"] == "LocalExecutor"
    # The Fernet key / JWT secret come from docker/.env and are required (no silent default).
    for key in ("AIRFLOW__CORE__FERNET_KEY", "AIRFLOW__API_AUTH__JWT_SECRET", "AIRFLOW__API__SECRET_KEY"):
        with pytest.raises(KeyError):
            interpolate(env_of(services["airflow-scheduler"])[key], {})


def test_env_example_defines_every_required_variable() -> None:
    text = COMPOSE_FILE.read_text()
    required = {m.group("name") for m in _VAR.finditer(text) if m.group("op") in (":?", "?")}
    assert required, "expected required secrets in the compose file"
    missing = required - set(read_env_example())
    assert not missing, f"docker/.env.example lacks {sorted(missing)}"


def test_long_running_services_have_healthchecks(compose: dict[str, Any]) -> None:
    for name, svc in compose["services"].items():
        if name == "airflow-init":
            assert svc.get("restart") == "no"
            continue
        check = svc.get("healthcheck")
        assert check and check.get("test"), f"{name} has no healthcheck"
        assert check["test"][0] in ("CMD", "CMD-SHELL"), name


def test_dependencies_wait_for_health_and_init(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name, svc in services.items():
        for dep, cond in (svc.get("depends_on") or {}).items():
            assert dep in services, f"{name} depends on unknown service {dep}"
            if cond["condition"] == "service_healthy":
                assert services[dep].get("healthcheck"), (
                    f"{name} waits for {dep}'s health; it has no healthcheck"
                )
        if name.startswith("airflow-") and name != "airflow-init":
            deps = svc["depends_on"]
            assert deps["airflow-init"]["condition"] == "service_completed_successfully", name
            assert deps["postgres"]["condition"] == "service_healthy", name


def test_init_migrates_writes_admin_and_creates_pools(compose: dict[str, Any]) -> None:
    init = compose["services"]["airflow-init"]
    script = "\n".join(init["command"])
    assert "airflow db migrate" in script
    assert "simple_auth_manager_passwords.json" in script
    assert "airflow pools import /opt/airflow/gpu-dag/pools.json" in script
    assert "./pools.json:/opt/airflow/gpu-dag/pools.json:ro" in init["volumes"]
    pools = json.loads((DOCKER / "pools.json").read_text())
    for name, spec in pools.items():
        assert isinstance(spec["slots"], int) and spec["slots"] > 0, name
        assert spec["description"], name  # `airflow pools import` skips entries without one
    declared = json.loads(env_of(init)["AIRFLOW__GPU_DAG__POOLS"])
    assert declared == {name: spec["slots"] for name, spec in pools.items()}
    # The api-server reads the password file the init container wrote, and must be able to write
    # it: Airflow's SimpleAuthManager opens it with "a+" at start, and a read-only mount stops it.
    api_volumes = compose["services"]["airflow-api-server"]["volumes"]
    assert "airflow-auth:/opt/airflow/auth" in api_volumes


def test_celery_profile_has_one_queue_per_gpu_host(compose: dict[str, Any]) -> None:
    services = compose["services"]
    workers = {n: s for n, s in services.items() if "celery worker" in str(s.get("command", ""))}
    assert len(workers) >= 2, "several GPU worker hosts expected"
    queues = set()
    for name, svc in workers.items():
        assert svc.get("profiles") == ["celery"], name
        match = re.search(r"--queues\s+(\S+)", svc["command"])
        assert match, name
        served = match.group(1).split(",")
        assert served[0] == svc["hostname"], f"{name}: its first queue should be named after its host"
        # tasks without queue= go to [operators] default_queue: some worker must serve it
        assert env_of(svc)["AIRFLOW__OPERATORS__DEFAULT_QUEUE"] in served, f"{name} ignores the default queue"
        queues.add(served[0])
        devices = svc["deploy"]["resources"]["reservations"]["devices"]
        assert any(d["driver"] == "nvidia" and "gpu" in d["capabilities"] for d in devices), name
        assert svc["depends_on"]["redis"]["condition"] == "service_healthy"
        assert "inspect ping" in " ".join(svc["healthcheck"]["test"])
    assert len(queues) == len(workers)
    assert services["redis"]["profiles"] == ["celery"]
    # Each host has its own GPU pool (watermark) named after its queue.
    pools = json.loads((DOCKER / "pools.json").read_text())
    for queue_name in queues:
        assert queue_name.replace("-", "_") in pools, f"no pool for host queue {queue_name}"
    # ... sized to the GPUs its worker gets by default, in every place that sizes it: a bigger pool
    # admits tasks the worker can never lease.
    env_example = dict(
        line.split("=", 1)
        for line in (DOCKER / ".env.example").read_text().splitlines()
        if line and not line.startswith("#")
    )
    declared = json.loads(env_of(services["airflow-init"])["AIRFLOW__GPU_DAG__POOLS"])
    watermark = yaml.safe_load((DOCKER / "watermark.yaml").read_text())["pools"]
    for name, svc in workers.items():
        pool = svc["hostname"].replace("-", "_")
        (device,) = svc["deploy"]["resources"]["reservations"]["devices"]
        (ids,) = device["device_ids"]
        variable, default = re.fullmatch(r"\$\{(\w+):-([\d,]+)\}", ids).groups()  # type: ignore[union-attr]
        assert env_example[variable] == default, f"{name}: .env.example and the compose default differ"
        gpus = len(default.split(","))
        assert pools[pool]["slots"] == declared[pool] == watermark[pool]["source"]["gpus"] == gpus, name
    # The default (single box) profile does not start Celery pieces.
    assert all("profiles" not in services[n] for n in AIRFLOW_CORE_SERVICES | {"postgres"})


def test_gpu_readers_reserve_nvidia_devices(compose: dict[str, Any]) -> None:
    for name in ("airflow-scheduler", "airflow-watermark"):
        devices = compose["services"][name]["deploy"]["resources"]["reservations"]["devices"]
        assert devices[0]["driver"] == "nvidia"
        assert {"gpu", "utility"} <= set(devices[0]["capabilities"]), f"{name}: NVML needs `utility`"


def test_interpolate_helper() -> None:
    assert interpolate("${A:-x}/${B}", {"B": "b"}) == "x/b"
    assert interpolate("$${HOSTNAME}", {}) == "${HOSTNAME}"
    with pytest.raises(KeyError, match="C"):
        interpolate("${C:?set C}", {})
