#!/usr/bin/env bash
# Entrypoint of the Airflow stand-in image (airflow.Dockerfile), written for the smoke run: it does
# what docker/docker-compose.yaml relies on from the official image's entrypoint.
#   - a uid without a passwd entry (run with group 0) gets one, HOME=/home/airflow;
#   - umask 0002 (files on shared volumes stay writable for group 0);
#   - waits for the metadata DB with `airflow db check`, CONNECTION_CHECK_MAX_COUNT tries (default
#     20, 0 skips) CONNECTION_CHECK_SLEEP_TIME seconds apart (default 3);
#   - `bash ...` and `python ...` run those; `airflow X ...` and `X ...` both run `airflow X ...`.
set -euo pipefail
command_name="${1:-}"
unset PIP_USER
umask 0002

if ! whoami >/dev/null 2>&1; then
  if [[ -w /etc/passwd ]]; then
    echo "default:x:$(id -u):0:default user:${AIRFLOW_USER_HOME_DIR}:/sbin/nologin" >>/etc/passwd
  fi
  export HOME="${AIRFLOW_USER_HOME_DIR}"
fi

max_tries="${CONNECTION_CHECK_MAX_COUNT:-20}"
pause="${CONNECTION_CHECK_SLEEP_TIME:-3}"
if [[ "${max_tries}" -gt 0 ]]; then
  for ((try = 1; ; try++)); do
    if out="$(airflow db check 2>&1)"; then
      break
    fi
    if [[ "${try}" -ge "${max_tries}" ]]; then
      echo "entrypoint: the metadata DB is still unreachable after ${max_tries} tries:" >&2
      echo "${out}" >&2
      exit 1
    fi
    sleep "${pause}"
  done
fi

case "${command_name}" in
  bash) shift; exec /bin/bash "$@" ;;
  python) shift; exec python "$@" ;;
  airflow) shift ;;
esac
exec airflow "$@"
