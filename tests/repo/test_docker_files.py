"""docker/Dockerfile: built on the official image of the Airflow version the provider pins."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


DOCKERFILE = ROOT / "docker" / "Dockerfile"


def from_image() -> tuple[str, str]:
    """``(airflow_version, python_version)`` of the Dockerfile's ``FROM apache/airflow:X-pythonY``."""
    froms = [
        line.split()[1] for line in DOCKERFILE.read_text().splitlines() if line.upper().startswith("FROM ")
    ]
    assert len(froms) == 1, f"expected one FROM line, found {froms}"
    match = re.fullmatch(r"apache/airflow:(\d+\.\d+\.\d+)-python(\d+\.\d+)", froms[0])
    assert match, f"FROM must be the official apache/airflow:<version>-python<x.y> image, not {froms[0]}"
    return match.group(1), match.group(2)


def pinned(name: str) -> str:
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line.lower().startswith(f"{name}=="):
            return line.split("==", 1)[1].strip()
    raise AssertionError(f"{name} is not pinned in constraints.txt")


def test_from_matches_pinned_airflow_and_python() -> None:
    airflow_version, python_version = from_image()
    assert airflow_version == pinned("apache-airflow")
    assert airflow_version == pinned("apache-airflow-core")
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    lower = re.search(r">=\s*(\d+\.\d+)", requires)
    upper = re.search(r"<\s*(\d+\.\d+)", requires)
    assert lower and upper
    as_tuple = lambda v: tuple(int(p) for p in v.split("."))  # noqa: E731
    assert as_tuple(lower.group(1)) <= as_tuple(python_version) < as_tuple(upper.group(1))


def test_installs_the_provider_with_the_constraints() -> None:
    text = DOCKERFILE.read_text()
    assert re.search(r"COPY\s+--chown=airflow:0\s+\.\s+/opt/airflow-gpu-dag", text)
    install = text[text.index("RUN pip install") :]
    assert "--constraint /opt/airflow-gpu-dag/constraints.txt" in install
    assert '"apache-airflow==${AIRFLOW_VERSION}"' in install  # never up/downgrade the image's Airflow
    assert "/opt/airflow-gpu-dag[nvml]" in install
    assert "USER airflow" in text and "USER root" not in text[text.index("RUN pip install") :]


def test_build_context_excludes_local_state() -> None:
    ignored = set((ROOT / "docker" / "Dockerfile.dockerignore").read_text().split())
    assert {".git", ".venv", "**/__pycache__"} <= ignored


def test_secrets_file_stays_out_of_the_image_and_git() -> None:
    """docker/.env (passwords, Fernet key) must not be copied by ``COPY .`` nor committed."""
    ignored = (ROOT / "docker" / "Dockerfile.dockerignore").read_text().split()
    assert "**/.env" in ignored
    assert "**/.env.example" not in ignored and not any(p.startswith("!") for p in ignored)
    check = subprocess.run(["git", "check-ignore", "-q", "docker/.env"], cwd=ROOT, check=False)
    assert check.returncode == 0, "docker/.env is not ignored by git"
    assert (
        subprocess.run(["git", "check-ignore", "-q", "docker/.env.example"], cwd=ROOT, check=False).returncode
        == 1
    ), "docker/.env.example (the template) must stay tracked"


def test_every_copied_path_exists() -> None:
    for line in DOCKERFILE.read_text().splitlines():
        if line.startswith("COPY "):
            sources = [p for p in line.split()[1:-1] if not p.startswith("--")]
            for src in sources:
                assert (ROOT / src).exists(), f"Dockerfile copies {src}, which is not in the repository"


def test_named_volume_mount_points_belong_to_airflow() -> None:
    """A fresh named volume takes the ownership of the image directory it is mounted on; the init
    container (user airflow) writes the password file into /opt/airflow/auth."""
    text = DOCKERFILE.read_text()
    mkdir = text.index("RUN mkdir -p /opt/airflow/auth")
    assert text.rindex("USER airflow", 0, mkdir) > text.rfind("USER root", 0, mkdir)


def test_the_copied_repository_is_installable() -> None:
    """``pip install /opt/airflow-gpu-dag`` needs what pyproject.toml names (readme) in the context."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    readme = project.get("readme")
    if isinstance(readme, str):
        assert (ROOT / readme).is_file(), f"pyproject.toml names readme {readme!r}, which is missing"
    ignored = (ROOT / "docker" / "Dockerfile.dockerignore").read_text().split()
    for needed in ("pyproject.toml", "constraints.txt", "airflow_gpu_dag", "dags", str(readme)):
        assert needed not in ignored, f"{needed} is excluded from the build context"
