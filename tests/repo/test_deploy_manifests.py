"""deploy/: the Kubernetes manifests of the watermark controller and the Helm values snippet.

No cluster is needed: every object is validated with ``kubernetes_validate`` against the Kubernetes
1.37 OpenAPI schema in strict mode (unknown fields are errors), the Helm sidecar as the container of
a Pod; then the pieces are checked against each other and against the provider: RBAC grants exactly
read access to nodes and pods, the controller's arguments parse with the CLI's own arguments, the
probes hit the port the health server listens on, watermark.yaml parses with the provider's config
loader, ``[gpu_dag]`` options exist in provider info, and the connection URI is a ``gpu_dag_api`` one."""

from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

import airflow_gpu_dag
from airflow_gpu_dag.get_provider_info import get_provider_info

ROOT = Path(__file__).resolve().parents[2]


K8S = ROOT / "deploy" / "kubernetes"


HELM = ROOT / "deploy" / "helm"


K8S_VERSION = "1.37"


NAMESPACE = "airflow"


#: Options of ``airflow gpu-dag watermark`` that the controller's health server (issue #15.2) adds;
#: until that branch is merged the parser here does not know them yet.
PENDING_FLAGS = {"--health-port", "--health-host"}


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _manifests() -> dict[str, dict[str, Any]]:
    """``Kind/name`` -> object, of every manifest in deploy/kubernetes (the Secret example included)."""
    out = {}
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for doc in _docs(path):
            out[f"{doc['kind']}/{doc['metadata']['name']}"] = doc
    return out


def _validate(obj: dict[str, Any]) -> None:
    kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def _version() -> str:
    return airflow_gpu_dag.__version__


def _values() -> dict[str, Any]:
    return dict(yaml.safe_load((HELM / "values-gpu-dag.yaml").read_text()))


def _deployment() -> dict[str, Any]:
    return _manifests()["Deployment/airflow-gpu-dag-watermark"]


def _container(pod_spec: dict[str, Any]) -> dict[str, Any]:
    (container,) = pod_spec["containers"]
    return dict(container)


def _watermark_args(args: list[str]) -> argparse.Namespace:
    from airflow_gpu_dag.cli.watermark_command import WATERMARK_ARGS

    assert args[:2] == ["gpu-dag", "watermark"], args
    parser = argparse.ArgumentParser(exit_on_error=False)
    for arg in WATERMARK_ARGS:
        arg.add_to_parser(parser)
    parsed, rest = parser.parse_known_args(args[2:])
    unknown = {flag for flag in rest if flag.startswith("--")}
    assert unknown <= PENDING_FLAGS, f"airflow gpu-dag watermark has no options {unknown - PENDING_FLAGS}"
    for flag in unknown:
        setattr(parsed, flag[2:].replace("-", "_"), rest[rest.index(flag) + 1])
    return parsed


def _config_path(pod_spec: dict[str, Any], container: dict[str, Any]) -> tuple[str, str]:
    """(ConfigMap name, key) of the file the container's ``--config`` names."""
    path = _watermark_args(container["args"]).config
    volumes = {v["name"]: v for v in pod_spec["volumes"]}
    for mount in container["volumeMounts"]:
        if path.startswith(mount["mountPath"].rstrip("/") + "/"):
            config_map = volumes[mount["name"]]["configMap"]
            file = path[len(mount["mountPath"].rstrip("/")) + 1 :]
            items = {i["path"]: i["key"] for i in config_map.get("items", [])} or {file: file}
            return config_map["name"], items[file]
    raise AssertionError(f"--config {path} is on no mounted volume")


def _check_controller(pod_spec: dict[str, Any], container: dict[str, Any]) -> None:
    args = _watermark_args(container["args"])
    assert not args.once, "the controller must run long, not --once"
    assert args.conn_id == "gpu_dag_api"
    assert str(args.health_host) == "0.0.0.0", "the kubelet probes the pod IP, not localhost"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    for probe in ("startupProbe", "livenessProbe"):
        http = container[probe]["httpGet"]
        assert http["path"] == "/health", probe
        assert ports[http["port"]] == int(args.health_port), probe
    env = {e["name"]: e for e in container["env"]}
    secret = _manifests()["Secret/airflow-gpu-dag-api"]
    assert env["AIRFLOW_CONN_GPU_DAG_API"]["valueFrom"]["secretKeyRef"] == {
        "name": secret["metadata"]["name"],
        "key": "AIRFLOW_CONN_GPU_DAG_API",
    }
    k8s_conn = json.loads(env["AIRFLOW_CONN_KUBERNETES_DEFAULT"]["value"])
    assert k8s_conn == {"conn_type": "kubernetes", "extra": {"in_cluster": True}}
    assert container["image"] == f"airflow-gpu-dag:{_version()}"
    assert container["securityContext"]["allowPrivilegeEscalation"] is False


def _watermark_yaml(text: str, tmp_path: Path) -> Any:
    from airflow_gpu_dag.watermark.config import load_config

    path = tmp_path / "watermark.yaml"
    path.write_text(text)
    return load_config(path)


def _sidecar_pod() -> dict[str, Any]:
    scheduler = _values()["scheduler"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "airflow-scheduler"},
        "spec": {
            "containers": [{"name": "scheduler", "image": "airflow-gpu-dag", "args": ["scheduler"]}]
            + scheduler["extraContainers"],
            "volumes": scheduler["extraVolumes"],
        },
    }


@pytest.mark.parametrize("name", sorted(_manifests()))
def test_every_manifest_is_valid_kubernetes(name: str) -> None:
    _validate(_manifests()[name])


def test_the_validator_rejects_a_broken_deployment() -> None:
    broken = copy.deepcopy(_deployment())
    _container(broken["spec"]["template"]["spec"])["livenessProbe"]["httpGet"]["paht"] = "/health"
    with pytest.raises(kubernetes_validate.ValidationError):
        _validate(broken)
    broken = copy.deepcopy(_deployment())
    broken["spec"]["replicas"] = "one"
    with pytest.raises(kubernetes_validate.ValidationError):
        _validate(broken)


def test_kustomization_lists_every_manifest_but_the_secret_example() -> None:
    (kustomization,) = _docs(K8S / "kustomization.yaml")
    files = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml", "secret.example.yaml"}
    assert set(kustomization["resources"]) == files
    assert kustomization["namespace"] == NAMESPACE
    for name, obj in _manifests().items():
        if not name.startswith("Cluster"):
            assert obj["metadata"]["namespace"] == NAMESPACE, name


def test_cluster_role_reads_nodes_and_pods_and_nothing_else() -> None:
    role = _manifests()["ClusterRole/airflow-gpu-dag-watermark"]
    grants = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert grants == {("", r, v) for r in ("nodes", "pods") for v in ("get", "list", "watch")}
    assert all(set(rule) == {"apiGroups", "resources", "verbs"} for rule in role["rules"])


def test_the_role_is_bound_to_the_controllers_service_account() -> None:
    manifests = _manifests()
    binding = manifests["ClusterRoleBinding/airflow-gpu-dag-watermark"]
    account = manifests["ServiceAccount/airflow-gpu-dag-watermark"]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "airflow-gpu-dag-watermark",
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": NAMESPACE}
    ]
    assert _deployment()["spec"]["template"]["spec"]["serviceAccountName"] == account["metadata"]["name"]


def test_deployment_runs_one_long_running_controller_with_probes() -> None:
    deployment = _deployment()
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    pod = deployment["spec"]["template"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    _check_controller(pod["spec"], _container(pod["spec"]))
    assert "readinessProbe" in _container(pod["spec"])


def test_configmap_holds_a_valid_watermark_config(tmp_path: Path) -> None:
    pod_spec = _deployment()["spec"]["template"]["spec"]
    name, key = _config_path(pod_spec, _container(pod_spec))
    config_map = _manifests()[f"ConfigMap/{name}"]
    config = _watermark_yaml(config_map["data"][key], tmp_path)
    assert {p.name for p in config.pools} == set(json.loads(_values()["config"]["gpu_dag"]["pools"]))
    assert all(p.source.type == "kubernetes" for p in config.pools)
    assert config.lease.lock_file is None and config.lease.variable, "pods share no file: use the Variable"


def test_the_secret_example_is_a_gpu_dag_api_connection() -> None:
    from airflow.models.connection import Connection

    from airflow_gpu_dag.hooks.airflow_api import CONN_TYPE, base_url_of

    uri = _manifests()["Secret/airflow-gpu-dag-api"]["stringData"]["AIRFLOW_CONN_GPU_DAG_API"]
    conn = Connection(conn_id="gpu_dag_api", uri=uri)
    assert conn.conn_type == CONN_TYPE
    assert base_url_of(conn.host, conn.port, conn.schema, conn.conn_type) == (
        "http://airflow-api-server.airflow.svc:8080"
    )
    assert conn.login and conn.password == "CHANGE-ME"


def test_the_image_entrypoint_runs_airflow_with_the_args() -> None:
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    assert "ENTRYPOINT" not in dockerfile, "the manifests pass airflow's arguments to the official entrypoint"


def test_helm_sidecar_and_volumes_are_valid_kubernetes() -> None:
    _validate(_sidecar_pod())


def test_helm_sidecar_runs_the_same_controller_as_the_deployment(tmp_path: Path) -> None:
    pod = _sidecar_pod()
    (sidecar,) = [c for c in pod["spec"]["containers"] if c["name"] == "gpu-dag-watermark"]
    _check_controller(pod["spec"], sidecar)
    assert sidecar["args"] == _container(_deployment()["spec"]["template"]["spec"])["args"]
    name, key = _config_path(pod["spec"], sidecar)
    chart_maps = _values()["extraConfigMaps"]
    text = yaml.safe_load(chart_maps[name]["data"])[key]
    deployment_text = _manifests()["ConfigMap/airflow-gpu-dag-watermark"]["data"]["watermark.yaml"]
    assert _watermark_yaml(text, tmp_path) == _watermark_yaml(deployment_text, tmp_path)


def test_helm_values_set_known_gpu_dag_options_and_the_connection_secret() -> None:
    values = _values()
    options = get_provider_info()["config"]["gpu_dag"]["options"]
    unknown = set(values["config"]["gpu_dag"]) - set(options)
    assert not unknown, f"[gpu_dag] has no options {unknown} (get_provider_info.py)"
    assert json.loads(values["config"]["gpu_dag"]["pools"]) == {"gpu_default": 8}
    assert values["secret"] == [
        {
            "envName": "AIRFLOW_CONN_GPU_DAG_API",
            "secretName": "airflow-gpu-dag-api",
            "secretKey": "AIRFLOW_CONN_GPU_DAG_API",
        }
    ]
    assert values["defaultAirflowTag"] == _version()
    pins = dict(
        line.split("==", 1) for line in (ROOT / "constraints.txt").read_text().splitlines() if "==" in line
    )
    assert values["airflowVersion"] == pins["apache-airflow"]


def test_helm_rbac_binds_the_read_only_role_to_the_scheduler() -> None:
    (binding,) = _docs(HELM / "rbac.yaml")
    _validate(binding)
    assert binding["roleRef"]["name"] == "airflow-gpu-dag-watermark"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "airflow-scheduler", "namespace": NAMESPACE}
    ]
