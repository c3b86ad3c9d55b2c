# Stand-in for the `postgres` image, for the Docker smoke run (scripts/docker_smoke.py) where the
# registry image cannot be pulled: Debian bookworm's PostgreSQL (15; the compose file names
# postgres:16, and Airflow 3.3 supports both). It keeps what docker/docker-compose.yaml relies on:
# POSTGRES_USER / POSTGRES_PASSWORD / POSTGRES_DB create the role and database at the first start,
# data in /var/lib/postgresql/data (a volume), password login over TCP on 5432, `pg_isready` on PATH.
ARG BASE_IMAGE=airflow-gpu-dag-smoke/debian:bookworm
FROM ${BASE_IMAGE}
RUN mkdir -p /etc/postgresql-common/createcluster.d \
    && echo "create_main_cluster = false" > /etc/postgresql-common/createcluster.d/no-main-cluster.conf \
    && apt-get update -q \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends postgresql-15 \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /var/lib/postgresql/data /run/postgresql \
    && chown -R postgres:postgres /var/lib/postgresql /run/postgresql
ENV PATH=/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PGDATA=/var/lib/postgresql/data \
    LANG=C.UTF-8
COPY postgres-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
RUN chmod 755 /usr/local/bin/docker-entrypoint.sh
EXPOSE 5432
STOPSIGNAL SIGINT
ENTRYPOINT ["/usr/local/bin/docker-entrypoint.sh"]
CMD ["postgres"]
