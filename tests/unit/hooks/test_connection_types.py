"""The provider's connection types (hooks/connection_types.py): plain data that the provider info
returns without loading a hook, and that Airflow 3.2+ builds the ``gpu_dag_api`` connection form from."""

from __future__ import annotations

import json
import subprocess
import sys

import jsonschema

from airflow_gpu_dag.hooks.connection_types import AIRFLOW_API_CONNECTION_TYPE, CONNECTION_TYPES


def test_the_provider_has_one_connection_type_gpu_dag_api() -> None:
    assert CONNECTION_TYPES == (AIRFLOW_API_CONNECTION_TYPE,)
    assert AIRFLOW_API_CONNECTION_TYPE["connection-type"] == "gpu_dag_api"
    assert AIRFLOW_API_CONNECTION_TYPE["hook-name"] == "Airflow REST API (gpu-dag)"
    assert (
        AIRFLOW_API_CONNECTION_TYPE["hook-class-name"] == "airflow_gpu_dag.hooks.airflow_api.AirflowApiHook"
    )


def test_it_is_plain_json_data() -> None:
    """The provider info travels as JSON (``airflow providers``, the UI's hook metadata)."""
    assert json.loads(json.dumps(CONNECTION_TYPES)) == list(CONNECTION_TYPES)


def test_provider_info_declares_it_without_loading_a_hook_or_airflow() -> None:
    """Every ``airflow`` command reads the provider info: it must not import the hook (nor Airflow)."""
    code = (
        "import sys\n"
        "from airflow_gpu_dag.get_provider_info import get_provider_info\n"
        "info = get_provider_info()\n"
        "print(info['connection-types'][0]['connection-type'])\n"
        "print(sorted(m for m in sys.modules if m == 'airflow' or m.startswith(('airflow.', 'httpx',"
        " 'airflow_gpu_dag.hooks.'))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.splitlines() == ["gpu_dag_api", "['airflow_gpu_dag.hooks.connection_types']"]


def test_the_extra_fields_are_a_masked_token_and_a_timeout() -> None:
    """Both optional (null allowed); the token is a password field, masked in the form."""
    conn_fields = AIRFLOW_API_CONNECTION_TYPE["conn-fields"]
    assert set(conn_fields) == {"token", "timeout"}
    for field in conn_fields.values():
        jsonschema.Draft202012Validator.check_schema(field["schema"])
        jsonschema.validate(None, field["schema"])
        assert field["label"] and field["description"]
    jsonschema.validate("eyJhbGciOiJIUzI1NiJ9.e30.sig", conn_fields["token"]["schema"])
    assert conn_fields["token"]["schema"]["format"] == "password"
    jsonschema.validate(2.5, conn_fields["timeout"]["schema"])
    assert not jsonschema.Draft202012Validator(conn_fields["timeout"]["schema"]).is_valid("ten")


def test_the_form_says_what_the_hook_does() -> None:
    """The default timeout the form names and the placeholders' URL forms are the hook's own."""
    from airflow_gpu_dag.hooks.airflow_api import DEFAULT_TIMEOUT, base_url_of

    description = AIRFLOW_API_CONNECTION_TYPE["conn-fields"]["timeout"]["description"]
    assert f"(default {DEFAULT_TIMEOUT:g})" in description
    placeholders = AIRFLOW_API_CONNECTION_TYPE["ui-field-behaviour"]["placeholders"]
    host = placeholders["host"]
    assert base_url_of(host, None) == host == "http://airflow-api-server:8080"
    # "8080 (when the URL has no port)": the port field fills in a missing port, never replaces one
    assert placeholders["port"].startswith("8080 ")
    assert base_url_of("http://airflow-api-server", 8080) == host
    assert base_url_of(host, 9090) == host


def test_the_form_hides_schema_and_relabels_host_and_login() -> None:
    behaviour = AIRFLOW_API_CONNECTION_TYPE["ui-field-behaviour"]
    assert behaviour["hidden-fields"] == ["schema"]
    assert behaviour["relabeling"] == {"host": "API server URL", "login": "Username"}
    assert set(behaviour["placeholders"]) == {"host", "port", "login", "password"}
