# Stand-in for apache/airflow:<AIRFLOW_VERSION>-python3.11, for the Docker smoke run
# (scripts/docker_smoke.py) where the registry image cannot be pulled. Built from Debian bookworm's
# packages (its python3 is 3.11) and PyPI only; tagged with the official name so docker/Dockerfile
# builds on it unchanged. It keeps what docker/Dockerfile and docker/docker-compose.yaml rely on:
#   - user `airflow` (uid 50000, group 0), HOME /home/airflow, AIRFLOW_HOME /opt/airflow (workdir),
#     /opt/airflow/{dags,logs,plugins,config} owned by airflow:0 and group-writable;
#   - `python` and `pip` on PATH, installing as `airflow` (here a venv at /home/airflow/.local, whose
#     bin/ is on PATH as in the official image), AIRFLOW_VERSION set, Airflow with the providers the
#     compose file uses (postgres, celery, redis) and the official image's cncf.kubernetes;
#   - ENTRYPOINT dumb-init + /entrypoint: wait for the metadata DB (CONNECTION_CHECK_MAX_COUNT),
#     `bash`/`python` run as such, anything else runs as `airflow <args>`;
#   - curl (the api-server's and scheduler's healthchecks).
ARG BASE_IMAGE=airflow-gpu-dag-smoke/debian:bookworm
FROM ${BASE_IMAGE}

ARG AIRFLOW_VERSION=3.3.2
ARG AIRFLOW_EXTRAS=celery,cncf-kubernetes,postgres,redis
ARG UV_VERSION=0.13.9
ENV AIRFLOW_VERSION=${AIRFLOW_VERSION} \
    AIRFLOW_UID=50000 \
    AIRFLOW_USER_HOME_DIR=/home/airflow \
    AIRFLOW_HOME=/opt/airflow \
    DUMB_INIT_SETSID=1 \
    LANG=C.UTF-8 \
    LC_ALL=C.UTF-8 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/home/airflow/.local/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

RUN apt-get update -q \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        python3 python3-venv ca-certificates curl dumb-init netcat-openbsd procps \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --uid 50000 --gid 0 --home-dir /home/airflow --create-home --shell /bin/bash airflow \
    && mkdir -p /opt/airflow/dags /opt/airflow/logs /opt/airflow/plugins /opt/airflow/config \
    && chown -R airflow:0 /opt/airflow /home/airflow && chmod -R g+rwX /opt/airflow /home/airflow

COPY airflow-entrypoint.sh /entrypoint
COPY constraints.txt constraints-standin.txt /tmp/constraints/
RUN chmod 755 /entrypoint

USER airflow
WORKDIR /opt/airflow
# uv (from PyPI, pinned) installs Airflow's ~200 packages in parallel: about a minute less than pip on
# 2 cores. --native-tls: the system CA store (with the host's local CAs), as pip uses it here.
RUN python3 -m venv /home/airflow/.local \
    && pip install "uv==${UV_VERSION}" \
    && uv pip install --native-tls --python /home/airflow/.local/bin/python \
        --constraint /tmp/constraints/constraints.txt \
        --constraint /tmp/constraints/constraints-standin.txt \
        "apache-airflow[${AIRFLOW_EXTRAS}]==${AIRFLOW_VERSION}" \
    && pip uninstall -y uv \
    && airflow version

ENTRYPOINT ["/usr/bin/dumb-init", "--", "/entrypoint"]
CMD []
