#!/usr/bin/env python3
"""Smoke run of the real Docker Compose stack in ``docker/``: build, start, run the example DAGs, stop.

    sudo python3 scripts/docker_smoke.py [--summary out.json] [--pull] [--keep-images]

What it does, in order (docs/deployment.md, "The smoke run"):

1. Finds a Docker daemon (``docker info``). When none answers and it runs as root with ``dockerd``
   installed (Debian's ``docker.io``), it starts a private one: ``dockerd --iptables=false
   --bridge=none`` on its own socket, exec root in a temporary folder, data root in a cache folder
   (so the images survive for the next run), overlay2 (vfs where overlay2 fails). That daemon gets a
   no-op ``nvidia-container-runtime-hook`` on its PATH, a stand-in for the NVIDIA Container Toolkit:
   Docker then accepts the compose file's ``driver: nvidia`` GPU reservations on a host without GPUs.
   A daemon it started is stopped at the end, by its PID.
2. Images the stack needs from a registry: ``FROM`` of docker/Dockerfile (apache/airflow), postgres
   and redis of the compose file. An image already present is used; with ``--pull`` the registry is
   tried next; otherwise a stand-in is built from Debian's packages and PyPI by the files in
   ``scripts/docker_smoke/`` (a bookworm root file system from ``debootstrap --variant=minbase``,
   ``docker import``-ed) and tagged with the official name, so ``docker/`` builds and runs unchanged.
   A stand-in is rebuilt only when its files changed (label ``airflow-gpu-dag.smoke.standin``).
3. Builds docker/Dockerfile (BuildKit, for docker/Dockerfile.dockerignore) as ``airflow-gpu-dag:smoke``.
4. ``docker compose up -d`` (Compose v2 where present, else ``docker-compose`` v1) with a generated
   env file (random secrets, free loopback ports) and one override file: the scheduler gets a static
   inventory of two simulated GPUs, the controller a config whose ``gpu_default`` source is static
   (2 GPUs; there is no NVML here), and the two healthchecks everything else waits on in turn,
   postgres's and the api-server's, probe every 2 and 5 s instead of 10 and 15 (the same commands,
   with as many times more retries: the same time to get healthy).
   Waits until airflow-init exited 0 and the api-server is healthy; that the scheduler, dag-processor,
   triggerer and controller get healthy too (probes 30 to 60 s apart) is awaited while the DAGs run,
   before their results are checked.
5. Checks, over the published api-server: the controller sized ``gpu_default`` (8 slots from
   docker/pools.json -> 2, its decision in the description); ``llm_pipeline`` and ``hparam_sweep``
   triggered over the REST API both succeed; the scheduler and the controller mount the same
   ``gpu-leases`` volume and the controller reads the lease ledger the scheduler's tasks wrote; the
   Critical-path page answers 200 with a token and 401 without.
6. ``docker compose down -v`` and a check that no container, volume or network of the project is
   left; a stand-in or the smoke image left on a daemon it did not start is removed too.

Exit status: 0 passed, 1 a check failed, 77 cannot run here (no daemon and none can be started:
not root, or no dockerd); the reason is printed. Only the Python standard library is used.
"""

from __future__ import annotations

import argparse
import base64
import concurrent.futures
import contextlib
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOCKER_DIR = ROOT / "docker"
COMPOSE_FILE = DOCKER_DIR / "docker-compose.yaml"
STANDINS = Path(__file__).resolve().parent / "docker_smoke"
EXIT_CANNOT_RUN = 77

DEBIAN_BASE = "airflow-gpu-dag-smoke/debian:bookworm"
APP_IMAGE = "airflow-gpu-dag:smoke"
STANDIN_LABEL = "airflow-gpu-dag.smoke.standin"
PROJECT = "airflow-gpu-dag-smoke"
#: The services of the default profile (LocalExecutor): every one must get healthy (init: exit 0).
SERVICES = {
    "postgres",
    "airflow-init",
    "airflow-api-server",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
    "airflow-watermark",
}
#: The GPUs the smoke run pretends to have: the scheduler's static inventory and the controller's
#: static source agree on it.
SMOKE_GPUS = 2
DAG_CONFS: dict[str, dict[str, Any]] = {
    "llm_pipeline": {"model_size": "tiny", "gpus": 2, "dataset_path": "/tmp/smoke/llm"},
    "hparam_sweep": {
        "model_size": "small",
        "gpus": 1,
        "dataset_path": "/tmp/smoke/sweep",
        "learning_rates": [0.3, 0.1, 0.03],
        "epochs": 100,
    },
}
NO_OP_NVIDIA_HOOK = """#!/bin/sh
# Stand-in for the NVIDIA Container Toolkit's OCI prestart hook, written by scripts/docker_smoke.py
# for its private dockerd: with it on dockerd's PATH, Docker accepts `driver: nvidia` device
# reservations. It reads the container state runc passes and does nothing (no GPU is attached).
cat >/dev/null
exit 0
"""


class CannotRun(Exception):
    """No Docker daemon answers and none can be started here."""


class CheckFailed(Exception):
    """The stack did not do what it should."""


def log(message: str) -> None:
    print(f"docker_smoke: {message}", flush=True)


def run(
    cmd: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    check: bool = True,
    capture: bool = False,
    timeout: float | None = None,
    stdin: Any = None,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``cmd``; its output goes to ours unless ``capture``."""
    result = subprocess.run(
        list(cmd),
        env=env,
        check=False,
        text=True,
        stdout=subprocess.PIPE if capture else None,
        stderr=subprocess.PIPE if capture else None,
        timeout=timeout,
        stdin=stdin,
        cwd=cwd,
    )
    if check and result.returncode != 0:
        detail = (result.stderr or result.stdout or "").strip()[-3000:] if capture else ""
        raise CheckFailed(f"{' '.join(cmd[:6])} ... exited {result.returncode}\n{detail}")
    return result


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ------------------------------------------------------------------------------------------ daemon
class Docker:
    """The docker CLI, the compose command and the daemon they talk to."""

    def __init__(self, cache_dir: Path, *, own_daemon: bool) -> None:
        self.cache_dir = cache_dir
        self.force_own = own_daemon
        self.env = dict(os.environ)
        self.cli = "docker"
        self.compose: list[str] = []
        self.compose_version = ""
        self.daemon_pid: int | None = None
        self.exec_root: Path | None = None
        self.storage_driver = ""

    @property
    def ours(self) -> bool:
        return self.daemon_pid is not None

    def _answers(self) -> bool:
        if not shutil.which(self.cli):
            return False
        try:
            return (
                run([self.cli, "info"], env=self.env, check=False, capture=True, timeout=30).returncode == 0
            )
        except subprocess.TimeoutExpired:
            return False

    def start(self) -> None:
        """Use the daemon that answers, or start a private one."""
        self.cli = self._pick_cli()
        if not self.force_own and self._answers():
            log(f"using the running Docker daemon ({self.env.get('DOCKER_HOST') or 'default socket'})")
        else:
            self._start_own()
        self.storage_driver = self.docker("info", "--format", "{{.Driver}}", capture=True).stdout.strip()
        self.compose = self._pick_compose()
        log(f"compose: {' '.join(self.compose)} ({self.compose_version})")

    def _pick_cli(self) -> str:
        """A docker CLI that builds with BuildKit (docker/Dockerfile.dockerignore needs it): one with
        the buildx plugin, or a client older than 23 (DOCKER_BUILDKIT=1 uses its built-in BuildKit)."""
        self.env["DOCKER_BUILDKIT"] = "1"
        candidates = [os.environ.get("DOCKER_CLI") or "", shutil.which("docker") or "", "/usr/bin/docker"]
        seen = []
        for cli in filter(None, candidates):
            if cli in seen or not Path(cli).exists():
                continue
            seen.append(cli)
            if run([cli, "buildx", "version"], env=self.env, check=False, capture=True).returncode == 0:
                return cli
            version = run(
                [cli, "version", "--format", "{{.Client.Version}}"], env=self.env, check=False, capture=True
            ).stdout.strip()
            major = re.match(r"(\d+)\.", version)
            if major and int(major.group(1)) < 23:
                return cli
        if not seen:
            raise CannotRun("no docker CLI (install Debian's docker.io: sudo bash scripts/ci_system_deps.sh)")
        raise CannotRun(
            f"none of {seen} builds with BuildKit (install the buildx plugin or Debian's docker.io)"
        )

    def _pick_compose(self) -> list[str]:
        v2 = run([self.cli, "compose", "version", "--short"], env=self.env, check=False, capture=True)
        if v2.returncode == 0:
            self.compose_version = "v" + v2.stdout.strip().lstrip("v")
            return [self.cli, "compose"]
        v1 = shutil.which("docker-compose")
        if v1:
            out = run([v1, "version", "--short"], env=self.env, check=False, capture=True).stdout.strip()
            self.compose_version = "v" + out
            return [v1]
        raise CannotRun("neither `docker compose` (v2) nor `docker-compose` (v1) is installed")

    def _start_own(self) -> None:
        dockerd = shutil.which("dockerd")
        if os.geteuid() != 0:
            raise CannotRun("no Docker daemon answers, and starting one needs root (sudo)")
        if not dockerd:
            raise CannotRun("no Docker daemon answers and dockerd is not installed (Debian: docker.io)")
        self.exec_root = Path(tempfile.mkdtemp(prefix="gpu-dag-dockerd-"))
        hooks = self.exec_root / "bin"
        hooks.mkdir()
        hook = hooks / "nvidia-container-runtime-hook"
        hook.write_text(NO_OP_NVIDIA_HOOK)
        hook.chmod(0o755)
        sock = self.exec_root / "docker.sock"
        self.env["DOCKER_HOST"] = f"unix://{sock}"
        env = dict(os.environ, PATH=f"{hooks}:{os.environ.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}")
        drivers = (
            [os.environ["GPU_DAG_SMOKE_STORAGE_DRIVER"]]
            if "GPU_DAG_SMOKE_STORAGE_DRIVER" in os.environ
            else []
        )
        for driver in drivers or ["overlay2", "vfs"]:
            data_root = self.cache_dir / f"data-root-{driver}"
            data_root.mkdir(parents=True, exist_ok=True)
            log_file = self.exec_root / f"dockerd-{driver}.log"
            cmd = [
                dockerd,
                "--iptables=false",
                "--bridge=none",
                f"--storage-driver={driver}",
                f"--data-root={data_root}",
                f"--exec-root={self.exec_root / 'exec'}",
                f"--pidfile={self.exec_root / 'dockerd.pid'}",
                f"--host=unix://{sock}",
                # its own containerd namespaces, should it share a system containerd with another dockerd
                "--containerd-namespace=gpu-dag-smoke",
                "--containerd-plugins-namespace=gpu-dag-smoke-plugins",
            ]
            with log_file.open("w") as out:
                proc = subprocess.Popen(
                    cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
                )
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline and proc.poll() is None:
                if sock.exists() and self._answers():
                    self.daemon_pid = proc.pid
                    log(f"started dockerd (pid {proc.pid}, {driver}, data root {data_root}, socket {sock})")
                    return
                time.sleep(1)
            log(f"dockerd with {driver} did not come up; its log:\n{log_file.read_text()[-3000:]}")
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=60)
        raise CannotRun(f"dockerd would not start (logs in {self.exec_root})")

    def stop(self) -> None:
        """Stop the daemon this run started (by its PID) and remove its exec root."""
        if self.daemon_pid is None:
            return
        pid, self.daemon_pid = self.daemon_pid, None
        log(f"stopping dockerd (pid {pid})")
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done = pid
            if done == pid:
                break
            time.sleep(0.5)
        else:
            log(f"dockerd (pid {pid}) ignored SIGTERM for 60 s; SIGKILL")
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
        if self.exec_root is not None:
            shutil.rmtree(self.exec_root, ignore_errors=True)

    def docker(self, *args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        return run([self.cli, *args], env=self.env, **kwargs)

    def image_labels(self, image: str) -> dict[str, str] | None:
        """The labels of a local image, or None when it is not there."""
        out = self.docker(
            "image", "inspect", "--format", "{{json .Config.Labels}}", image, check=False, capture=True
        )
        if out.returncode != 0:
            return None
        return json.loads(out.stdout.strip() or "null") or {}


# ------------------------------------------------------------------------------------------ images
def images_needed() -> dict[str, str]:
    """``{image: stand-in Dockerfile}`` for what the stack pulls: the FROM of docker/Dockerfile and
    the postgres and redis images of the compose file."""
    froms = re.findall(r"^FROM\s+(\S+)", (DOCKER_DIR / "Dockerfile").read_text(), re.MULTILINE)
    compose = COMPOSE_FILE.read_text()
    needed = {froms[-1]: "airflow.Dockerfile"}
    for name in ("postgres", "redis"):
        match = re.search(rf"^\s+image:\s*[\"']?({name}:[^\s\"']+)", compose, re.MULTILINE)
        if not match:
            raise CheckFailed(f"no {name} image in {COMPOSE_FILE}")
        needed[match.group(1)] = f"{name}.Dockerfile"
    return needed


def standin_files(dockerfile: str) -> list[Path]:
    """The files one stand-in is built from (its build context)."""
    files = [STANDINS / dockerfile]
    if dockerfile == "airflow.Dockerfile":
        files += [
            STANDINS / "airflow-entrypoint.sh",
            STANDINS / "constraints-standin.txt",
            ROOT / "constraints.txt",
        ]
    elif dockerfile == "postgres.Dockerfile":
        files.append(STANDINS / "postgres-entrypoint.sh")
    return files


def standin_digest(dockerfile: str) -> str:
    digest = hashlib.sha256()
    for path in standin_files(dockerfile):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def build_debian_base(docker: Docker, work: Path) -> None:
    """Debian bookworm (minbase) from Debian's mirror, imported as DEBIAN_BASE. The host's local CA
    certificates (/usr/local/share/ca-certificates) go in with it and pip uses the system bundle,
    so builds reach PyPI through whatever TLS proxy the host itself trusts."""
    if docker.image_labels(DEBIAN_BASE) is not None:
        return
    debootstrap = shutil.which("debootstrap")
    if not debootstrap:
        raise CannotRun("no stand-in base image and no debootstrap to build one (Debian: debootstrap)")
    if os.geteuid() != 0:
        raise CannotRun("debootstrap (the stand-ins' base image) needs root")
    mirror = os.environ.get("GPU_DAG_SMOKE_DEBIAN_MIRROR", "http://deb.debian.org/debian")
    rootfs = work / "rootfs"
    log(f"debootstrap --variant=minbase bookworm from {mirror}")
    started = time.monotonic()
    try:
        out = run(
            [debootstrap, "--variant=minbase", "bookworm", str(rootfs), mirror], check=False, capture=True
        )
        if out.returncode != 0:
            raise CheckFailed(f"debootstrap failed:\n{(out.stdout + out.stderr)[-3000:]}")
        shutil.rmtree(rootfs / "var/lib/apt/lists", ignore_errors=True)
        (rootfs / "var/lib/apt/lists/partial").mkdir(parents=True)
        for deb in (rootfs / "var/cache/apt/archives").glob("*.deb"):
            deb.unlink()
        security = mirror.rstrip("/") + "-security" if mirror.rstrip("/").endswith("/debian") else mirror
        (rootfs / "etc/apt/sources.list").write_text(
            f"deb {mirror} bookworm main\n"
            f"deb {mirror} bookworm-updates main\n"
            f"deb {security} bookworm-security main\n"
        )
        local_cas = rootfs / "usr/local/share/ca-certificates"
        local_cas.mkdir(parents=True, exist_ok=True)
        for cert in Path("/usr/local/share/ca-certificates").glob("*.crt"):
            shutil.copy(cert, local_cas / cert.name)
        (rootfs / "etc/pip.conf").write_text("[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n")
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        docker.docker(
            "import", "--change", 'CMD ["/bin/bash"]', "-", DEBIAN_BASE, stdin=tar.stdout, capture=True
        )
        if tar.wait() != 0:
            raise CheckFailed("tar of the debootstrap root file system failed")
    finally:
        shutil.rmtree(rootfs, ignore_errors=True)
    log(f"built {DEBIAN_BASE} in {time.monotonic() - started:.0f} s")


def build_standin(docker: Docker, work: Path, image: str, dockerfile: str) -> float:
    """Build one stand-in from its files (a context of its own); returns the seconds it took."""
    context = work / f"context-{dockerfile}"
    context.mkdir()
    for path in standin_files(dockerfile):
        shutil.copy(path, context / path.name)
    started = time.monotonic()
    out = docker.docker(
        "build",
        "--network=host",
        "--progress=plain",
        f"--build-arg=BASE_IMAGE={DEBIAN_BASE}",
        f"--label={STANDIN_LABEL}={standin_digest(dockerfile)}",
        "-f",
        str(context / dockerfile),
        "-t",
        image,
        str(context),
        check=False,
        capture=True,
    )
    if out.returncode != 0:
        raise CheckFailed(f"building the stand-in {image} failed:\n{(out.stdout + out.stderr)[-4000:]}")
    return time.monotonic() - started


def pull_image(docker: Docker, image: str) -> bool:
    log(f"docker pull {image}")
    if docker.docker("pull", image, check=False, capture=True, timeout=900).returncode == 0:
        return True
    log(f"cannot pull {image}: building a stand-in")
    return False


def ensure_images(docker: Docker, work: Path, *, pull: bool) -> dict[str, str]:
    """Every registry image the stack needs, present locally: ``{image: how}``, how being
    ``present``, ``pulled``, ``stand-in (cached)`` or ``stand-in (built in N s)``. The stand-ins
    to build are built at once (apt and pip downloads overlap the other builds' CPU work)."""
    how: dict[str, str] = {}
    to_build: dict[str, str] = {}
    for image, dockerfile in images_needed().items():
        labels = docker.image_labels(image)
        if labels is not None and STANDIN_LABEL not in labels:
            how[image] = "present"
        elif labels is not None and labels.get(STANDIN_LABEL) == standin_digest(dockerfile):
            how[image] = "stand-in (cached)"
        elif pull and labels is None and pull_image(docker, image):
            how[image] = "pulled"
        else:
            to_build[image] = dockerfile
    if not to_build:
        return how
    build_debian_base(docker, work)
    log(f"building the stand-ins {', '.join(to_build)} from {', '.join(to_build.values())}")
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(to_build)) as pool:
        futures = {pool.submit(build_standin, docker, work, i, f): i for i, f in to_build.items()}
        for future in concurrent.futures.as_completed(futures):
            seconds = future.result()
            how[futures[future]] = f"stand-in (built in {seconds:.0f} s)"
            log(f"built the stand-in {futures[future]} in {seconds:.0f} s")
    return how


# ------------------------------------------------------------------------------------------ stack
class Stack:
    """The compose project: env file, override file, up/down, and its containers."""

    def __init__(self, docker: Docker, work: Path) -> None:
        self.docker = docker
        self.work = work
        self.api_port = free_port()
        self.password = secrets.token_urlsafe(16)
        self.env_file = work / "smoke.env"
        self.override = work / "docker-compose.smoke.yaml"
        self.api_url = f"http://127.0.0.1:{self.api_port}"
        self.up_started = time.monotonic()
        self.timeline: dict[str, dict[str, float]] = {}
        fernet = base64.urlsafe_b64encode(os.urandom(32)).decode()
        values = {
            "POSTGRES_PASSWORD": secrets.token_urlsafe(16),
            "AIRFLOW_ADMIN_PASSWORD": self.password,
            "AIRFLOW_FERNET_KEY": fernet,
            "AIRFLOW_JWT_SECRET": secrets.token_urlsafe(64),  # HMAC-SHA512: 64+ bytes
            "AIRFLOW_API_SECRET_KEY": secrets.token_urlsafe(32),
            "AIRFLOW_EXECUTOR": "LocalExecutor",
            "REDIS_PASSWORD": secrets.token_urlsafe(16),
            "GPU_HOST_A_DEVICES": "0,1,2,3",
            "GPU_HOST_B_DEVICES": "4,5,6,7",
            "AIRFLOW_PUBLISH": f"127.0.0.1:{self.api_port}",
            "AIRFLOW_BASE_URL": self.api_url,
            "POSTGRES_PUBLISH": f"127.0.0.1:{free_port()}",
            "AIRFLOW_GPU_DAG_IMAGE": APP_IMAGE,
        }
        self.env_file.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
        self.env_file.chmod(0o600)
        watermark = STANDINS / "watermark.yaml"
        self.override.write_text(
            "# Written by scripts/docker_smoke.py: what differs in the smoke run (no GPUs, faster probes).\n"
            "services:\n"
            # probes 5 and 3 times as often, as many times more retries: the same grace
            "  postgres:\n"
            "    healthcheck:\n"
            "      interval: 2s\n"
            "      retries: 50\n"
            "  airflow-api-server:\n"
            "    healthcheck:\n"
            "      interval: 5s\n"
            "      retries: 15\n"
            "  airflow-scheduler:\n"
            "    environment:\n"
            f'      AIRFLOW__GPU_DAG__INVENTORY: "{SMOKE_GPUS}xsim:80GiB"\n'
            "  airflow-watermark:\n"
            "    volumes:\n"
            f"      - {watermark}:/opt/airflow/gpu-dag/watermark.yaml:ro\n"
        )

    def compose_cmd(self) -> list[str]:
        return [
            *self.docker.compose,
            "--project-name",
            PROJECT,
            "--env-file",
            str(self.env_file),
            "-f",
            str(COMPOSE_FILE),
            "-f",
            str(self.override),
        ]

    def compose(self, *args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        return run([*self.compose_cmd(), *args], env=self.docker.env, cwd=ROOT, **kwargs)

    def containers(self) -> dict[str, dict[str, Any]]:
        """``{service: docker inspect}`` of the project's containers."""
        ids = self.docker.docker(
            "ps", "-aq", "--filter", f"label=com.docker.compose.project={PROJECT}", capture=True
        ).stdout.split()
        if not ids:
            return {}
        data = json.loads(self.docker.docker("inspect", *ids, capture=True).stdout)
        return {c["Config"]["Labels"]["com.docker.compose.service"]: c for c in data}

    def up(self, timeout: float, needed: set[str]) -> None:
        """``compose up -d`` (Compose v1 blocks while dependencies get healthy), watched until it
        returned and the ``needed`` services are ready (airflow-init exited 0, the others running and
        healthy). :meth:`wait_healthy` then waits for the rest; ``self.timeline`` has, per service,
        the seconds from ``up`` until its container was seen and until it was ready."""
        self.up_started = time.monotonic()
        up = subprocess.Popen(
            [*self.compose_cmd(), "up", "-d", "--no-build"],
            env=self.docker.env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        output: list[str] = []
        reader = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        reader.submit(lambda: output.extend(up.stdout or []))
        try:
            self._watch(needed, timeout, up, output)
        finally:
            if up.poll() is None:
                up.terminate()
                up.wait(timeout=60)
            reader.shutdown(wait=True)
            print("".join(output), end="", flush=True)

    def wait_healthy(self, timeout: float) -> dict[str, dict[str, float]]:
        """Until every service of the project is ready; returns ``self.timeline``."""
        self._watch(SERVICES, timeout)
        return self.timeline

    def _watch(
        self,
        needed: set[str],
        timeout: float,
        up: subprocess.Popen[str] | None = None,
        output: Sequence[str] = (),
    ) -> None:
        last = ""
        while time.monotonic() - self.up_started < timeout:
            if up is not None and up.poll() not in (None, 0):
                time.sleep(1)  # the rest of its output
                raise CheckFailed(f"compose up exited {up.returncode}:\n{''.join(output)[-3000:]}")
            states = {}
            for service, info in self.containers().items():
                state = info["State"]
                if service == "airflow-init":
                    if state["Status"] == "exited":
                        if state["ExitCode"] != 0:
                            raise CheckFailed(f"airflow-init exited {state['ExitCode']}")
                        states[service] = "done"
                    else:
                        states[service] = state["Status"]
                else:
                    health = (state.get("Health") or {}).get("Status", "no healthcheck")
                    states[service] = health if state["Status"] == "running" else state["Status"]
                    if state.get("RestartCount"):
                        states[service] += f" (restarted {state['RestartCount']}x)"
                now = round(time.monotonic() - self.up_started, 1)
                self.timeline.setdefault(service, {}).setdefault("started", now)
                if states[service] in ("done", "healthy"):
                    self.timeline[service].setdefault("ready", now)
            line = ", ".join(f"{s}={v}" for s, v in sorted(states.items()))
            if line != last:
                log(f"[{time.monotonic() - self.up_started:5.0f} s after up] {line}")
                last = line
            ready = {s for s, v in states.items() if v in ("done", "healthy")}
            if needed <= ready and (up is None or up.poll() == 0):
                return
            time.sleep(2)
        raise CheckFailed(f"not every service became healthy within {timeout:.0f} s: {last}")

    def cpu_seconds(self) -> dict[str, float]:
        """CPU time each running container used so far, from its cgroup (v1 cpuacct or v2 cpu.stat),
        where this host lets us read it: what the run costs, whatever else loads the machine."""
        out = {}
        for service, info in self.containers().items():
            cid = info["Id"]
            v1 = Path(f"/sys/fs/cgroup/cpuacct/docker/{cid}/cpuacct.usage")
            v2 = [
                Path(f"/sys/fs/cgroup/docker/{cid}/cpu.stat"),
                Path(f"/sys/fs/cgroup/system.slice/docker-{cid}.scope/cpu.stat"),
            ]
            with contextlib.suppress(OSError, ValueError):
                if v1.exists():
                    out[service] = round(int(v1.read_text()) / 1e9, 1)
                for stat in v2:
                    if stat.exists():
                        usage = dict(line.split() for line in stat.read_text().splitlines())
                        out[service] = round(int(usage["usage_usec"]) / 1e6, 1)
        return out

    def diagnostics(self) -> None:
        log("docker compose ps:")
        self.compose("ps", check=False)
        log("docker compose logs (tail):")
        self.compose("logs", "--no-color", "--tail=120", check=False)

    def down(self) -> None:
        self.compose("down", "-v", "--remove-orphans", "--timeout", "10", check=False, timeout=600)

    def leftovers(self) -> list[str]:
        """Containers, volumes and networks of the project still there."""
        label = f"label=com.docker.compose.project={PROJECT}"
        left = []
        for kind, args in (
            ("container", ["ps", "-aq", "--filter", label]),
            ("volume", ["volume", "ls", "-q", "--filter", label]),
            ("network", ["network", "ls", "-q", "--filter", label]),
        ):
            left += [f"{kind} {name}" for name in self.docker.docker(*args, capture=True).stdout.split()]
        return left


# ------------------------------------------------------------------------------------------ REST
class Api:
    """The stack's api-server over its published port (standard library HTTP)."""

    def __init__(self, base: str, password: str) -> None:
        self.base = base
        self.password = password
        self.token = ""

    def raw(
        self, method: str, path: str, body: Any = None, *, auth: bool = True, timeout: float = 60
    ) -> tuple[int, str]:
        headers = {"Accept": "application/json, text/html"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if auth:
            headers["Authorization"] = f"Bearer {self.token}"
        request = urllib.request.Request(self.base + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as resp:
                return resp.status, resp.read().decode(errors="replace")
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode(errors="replace")

    def login(self) -> None:
        status, text = self.raw(
            "POST", "/auth/token", {"username": "admin", "password": self.password}, auth=False
        )
        if status not in (200, 201):
            raise CheckFailed(f"POST /auth/token: {status} {text[:300]}")
        self.token = json.loads(text)["access_token"]

    def call(self, method: str, path: str, body: Any = None, *, ok: Sequence[int] = (200,)) -> Any:
        status, text = self.raw(method, "/api/v2" + path, body)
        if status == 401:
            self.login()
            status, text = self.raw(method, "/api/v2" + path, body)
        if status not in ok:
            raise CheckFailed(f"{method} /api/v2{path}: {status} {text[:500]}")
        return json.loads(text) if text else None


def wait_for(what: str, probe: Any, timeout: float, every: float = 3.0) -> Any:
    """Call ``probe()`` until it returns something truthy; CheckFailed with ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    last_error = ""
    while time.monotonic() < deadline:
        try:
            value = probe()
        except (CheckFailed, OSError, ValueError) as err:
            value, last_error = None, str(err)
        if value:
            return value
        time.sleep(every)
    raise CheckFailed(f"timed out after {timeout:.0f} s waiting for {what} {last_error}".strip())


def check_pool_sized(api: Api) -> dict[str, Any]:
    """The controller resized gpu_default from the 8 slots of docker/pools.json to the smoke run's GPUs
    and wrote its decision into the description."""

    def sized() -> dict[str, Any] | None:
        pool = api.call("GET", "/pools/gpu_default")
        decided = str(pool.get("description") or "").startswith("gpu-dag watermark:")
        return pool if decided and pool["slots"] == SMOKE_GPUS else None

    pool = wait_for("the controller to size gpu_default", sized, timeout=300)
    log(f"gpu_default: {pool['slots']} slots, {pool['description'][:160]}")
    return {"slots": pool["slots"], "description": pool["description"]}


def run_dags(api: Api, timeout: float) -> dict[str, dict[str, Any]]:
    """Unpause, trigger both example DAGs with their conf, wait for both runs to finish."""
    wait_for(
        "the example DAGs to be parsed",
        lambda: all(api.raw("GET", f"/api/v2/dags/{dag}")[0] == 200 for dag in DAG_CONFS),
        timeout=timeout,
    )
    errors = api.call("GET", "/importErrors")
    if errors.get("total_entries"):
        log(f"import errors: {json.dumps(errors)[:2000]}")
    runs = {}
    for dag, conf in DAG_CONFS.items():
        api.call("PATCH", f"/dags/{dag}", {"is_paused": False})
        run_ = api.call("POST", f"/dags/{dag}/dagRuns", {"logical_date": None, "conf": conf}, ok=(200,))
        runs[dag] = run_["dag_run_id"]
        log(f"triggered {dag}: {runs[dag]}")
    started = time.monotonic()
    results: dict[str, dict[str, Any]] = {}
    while len(results) < len(runs) and time.monotonic() - started < timeout:
        for dag, run_id in runs.items():
            if dag in results:
                continue
            state = api.call("GET", f"/dags/{dag}/dagRuns/{run_id}")["state"]
            if state in ("success", "failed"):
                tis = api.call("GET", f"/dags/{dag}/dagRuns/{run_id}/taskInstances?limit=100")[
                    "task_instances"
                ]
                results[dag] = {
                    "run_id": run_id,
                    "state": state,
                    "seconds": round(time.monotonic() - started, 1),
                    "tasks": {f"{t['task_id']}[{t['map_index']}]": t["state"] for t in tis},
                }
                log(f"{dag} {run_id}: {state} after {results[dag]['seconds']} s")
        time.sleep(3)
    for dag, run_id in runs.items():
        if dag not in results:
            tis = api.call("GET", f"/dags/{dag}/dagRuns/{run_id}/taskInstances?limit=100")["task_instances"]
            results[dag] = {
                "run_id": run_id,
                "state": "timeout",
                "seconds": round(time.monotonic() - started, 1),
                "tasks": {f"{t['task_id']}[{t['map_index']}]": t["state"] for t in tis},
            }
    return results


def check_lease_volume(stack: Stack) -> dict[str, Any]:
    """The scheduler and the controller mount one volume at [gpu_dag] lease_dir, and the controller
    reads the lease ledger the scheduler's task processes wrote there."""
    containers = stack.containers()
    lease_dir = "/opt/airflow/gpu-leases"
    mounts = {}
    for service in ("airflow-scheduler", "airflow-watermark"):
        found = [m for m in containers[service]["Mounts"] if m["Destination"] == lease_dir]
        if not found or found[0]["Type"] != "volume":
            raise CheckFailed(f"{service} has no volume at {lease_dir}: {containers[service]['Mounts']}")
        mounts[service] = found[0]["Name"]
    if len(set(mounts.values())) != 1:
        raise CheckFailed(f"the scheduler and the controller mount different volumes: {mounts}")
    name = containers["airflow-watermark"]["Name"].lstrip("/")
    listing = stack.docker.docker("exec", name, "ls", "-A", lease_dir, capture=True).stdout.split()
    ledger = stack.docker.docker(
        "exec", name, "sh", "-c", f"wc -l < {lease_dir}/usage.jsonl", check=False, capture=True
    )
    lines = int(ledger.stdout.strip() or 0) if ledger.returncode == 0 else 0
    if lines == 0:
        raise CheckFailed(f"the controller sees no lease ledger in {lease_dir}: {listing}")
    log(f"lease volume {mounts['airflow-scheduler']}: the controller sees {listing}, {lines} ledger lines")
    return {"volume": mounts["airflow-scheduler"], "files": listing, "ledger_lines": lines}


def check_critical_path_page(api: Api) -> dict[str, Any]:
    path = "/gpu-dag/critical-path/llm_pipeline"
    with_login, body = api.raw("GET", path)
    without_login, _ = api.raw("GET", path, auth=False)
    log(f"GET {path}: {with_login} with a token, {without_login} without")
    if with_login != 200 or without_login != 401:
        raise CheckFailed(f"{path}: {with_login} with a token, {without_login} without (want 200, 401)")
    if "llm_pipeline" not in body:
        raise CheckFailed(f"{path} does not name the DAG: {body[:300]}")
    return {"with_login": with_login, "without_login": without_login, "bytes": len(body)}


# ------------------------------------------------------------------------------------------ main
@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM (a CI timeout) unwinds like Ctrl-C, so the stack is taken down and dockerd stopped."""

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def smoke(args: argparse.Namespace, summary: dict[str, Any]) -> None:
    timings: dict[str, float] = summary.setdefault("timings_s", {})
    mark = time.monotonic()

    def lap(name: str) -> None:
        nonlocal mark
        now = time.monotonic()
        timings[name] = round(now - mark, 1)
        mark = now

    docker = Docker(Path(args.cache_dir), own_daemon=args.own_daemon)
    work = Path(tempfile.mkdtemp(prefix="gpu-dag-smoke-"))
    stack: Stack | None = None
    keep = False
    try:
        docker.start()
        summary["daemon"] = {
            "started_here": docker.ours,
            "storage_driver": docker.storage_driver,
            "compose": docker.compose_version,
        }
        lap("daemon")
        summary["images"] = ensure_images(docker, work, pull=args.pull)
        lap("images")
        log(f"docker build -f docker/Dockerfile -t {APP_IMAGE} .")
        dockerfile = str(DOCKER_DIR / "Dockerfile")
        out = docker.docker(
            "build", "--network=host", "--progress=plain", "-f", dockerfile, "-t", APP_IMAGE, str(ROOT),
            check=False, capture=True, cwd=ROOT,
        )  # fmt: skip
        if out.returncode != 0:
            raise CheckFailed(
                f"docker build of docker/Dockerfile failed:\n{(out.stdout + out.stderr)[-4000:]}"
            )
        lap("build")
        stack = Stack(docker, work)
        stack.down()  # what a killed earlier run may have left on a cached data root
        try:
            # The DAGs need the api-server healthy (compose up waits for it too: the scheduler and
            # the controller depend on it), the scheduler, dag-processor and triggerer running and
            # the controller's first tick (the pool check), not those four's healthchecks (probes
            # 30 to 60 s apart, each an `airflow` CLI start): they are awaited while the DAGs run.
            stack.up(args.timeout, needed={"postgres", "airflow-init", "airflow-api-server"})
            lap("up")
            api = Api(stack.api_url, stack.password)
            api.login()
            summary["pool"] = check_pool_sized(api)
            lap("pool")
            summary["runs"] = run_dags(api, args.timeout)
            lap("dags")
            summary["up_timeline_s"] = stack.wait_healthy(args.timeout)
            summary["healthy_after_s"] = {s: t["ready"] for s, t in summary["up_timeline_s"].items()}
            lap("healthy")
            failed = {dag: r for dag, r in summary["runs"].items() if r["state"] != "success"}
            if failed:
                raise CheckFailed(f"example DAG runs did not succeed: {json.dumps(failed, indent=1)}")
            summary["lease_volume"] = check_lease_volume(stack)
            summary["critical_path_page"] = check_critical_path_page(api)
            lap("checks")
        except BaseException:
            stack.diagnostics()
            if args.keep_on_failure:
                keep = True
                log(
                    "--keep-on-failure: the stack is still up; look with\n"
                    f"  export DOCKER_HOST={docker.env.get('DOCKER_HOST', '')}\n"
                    f"  {' '.join(stack.compose_cmd())} ps\n"
                    f"then take it down with `... down -v` and stop dockerd (pid {docker.daemon_pid})"
                )
            raise
    finally:
        if keep:
            pass
        elif stack is not None and docker.compose:
            summary["cpu_s"] = stack.cpu_seconds()
            if summary["cpu_s"]:
                log(f"CPU seconds per container: {summary['cpu_s']}")
            log("docker compose down -v")
            stack.down()
            summary["left_behind"] = stack.leftovers()
            if summary["left_behind"]:
                log(f"left behind: {summary['left_behind']}")
            lap("down")
        if keep:
            pass
        elif docker.compose and not docker.ours and not args.keep_images:
            # not our daemon: do not leave stand-ins under official names, nor the smoke image
            standins = [i for i, how in summary.get("images", {}).items() if how.startswith("stand-in")]
            docker.docker("image", "rm", APP_IMAGE, *standins, check=False, capture=True)
        if docker.ours and not keep:
            docker.docker("image", "prune", "-f", check=False, capture=True)
            docker.stop()
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    if summary.get("left_behind"):
        raise CheckFailed(f"down -v left {summary['left_behind']}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--summary", help="write what was run and checked, as JSON, to this file")
    parser.add_argument(
        "--pull", action="store_true", default=os.environ.get("GPU_DAG_SMOKE_PULL") == "1",
        help="try the registry for a missing image before building a stand-in (GPU_DAG_SMOKE_PULL=1)",
    )  # fmt: skip
    parser.add_argument(
        "--own-daemon", action="store_true", default=os.environ.get("GPU_DAG_SMOKE_OWN_DAEMON") == "1",
        help="start a private dockerd even when one is running (root; GPU_DAG_SMOKE_OWN_DAEMON=1)",
    )  # fmt: skip
    parser.add_argument(
        "--cache-dir",
        default=os.environ.get("GPU_DAG_SMOKE_CACHE")
        or str(Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "airflow-gpu-dag-smoke"),
        help="data root of a private dockerd: its images are kept for the next run",
    )
    parser.add_argument(
        "--keep-images", action="store_true", help="on a daemon it did not start, keep the stand-ins"
    )
    parser.add_argument(
        "--keep-on-failure", action="store_true", help="leave the stack (and dockerd) up when a check fails"
    )
    parser.add_argument("--timeout", type=float, default=900, help="seconds for each wait (default 900)")
    args = parser.parse_args(argv)
    summary: dict[str, Any] = {"project": PROJECT, "result": "failed"}
    started = time.monotonic()
    code = 1
    try:
        with sigterm_as_interrupt():
            smoke(args, summary)
        summary["result"] = "passed"
        code = 0
    except CannotRun as err:
        summary["result"] = "cannot run"
        summary["reason"] = str(err)
        log(f"cannot run: {err}")
        code = EXIT_CANNOT_RUN
    except (CheckFailed, subprocess.TimeoutExpired, OSError) as err:
        summary["error"] = str(err)
        log(f"FAILED: {err}")
    except KeyboardInterrupt as err:
        summary["error"] = f"interrupted ({err})"
        log(f"interrupted ({err})")
        code = 130
    summary["total_s"] = round(time.monotonic() - started, 1)
    log(f"{summary['result']} in {summary['total_s']} s; timings {summary.get('timings_s')}")
    if args.summary:
        Path(args.summary).write_text(json.dumps(summary, indent=2) + "\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
