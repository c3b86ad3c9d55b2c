# Stand-in for the `redis` image, for the Docker smoke run (scripts/docker_smoke.py) where the
# registry image cannot be pulled: Debian bookworm's Redis (7.0; the compose file names redis:7.4).
# `redis-server` and `redis-cli` on PATH, run as user redis from /data, no config file (listens on
# every interface; the compose file sets --requirepass).
ARG BASE_IMAGE=airflow-gpu-dag-smoke/debian:bookworm
FROM ${BASE_IMAGE}
RUN apt-get update -q \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends redis-server \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /data && chown redis:redis /data
USER redis
WORKDIR /data
EXPOSE 6379
CMD ["redis-server"]
