"""Tests of ``airflow_gpu_dag.hooks.deadline``."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from airflow_gpu_dag.hooks import deadline as deadline_module
from airflow_gpu_dag.hooks.deadline import AnswerTooLarge, deadline, deadline_client, fetch, time_left
from tests.unit.hooks.conftest import MARGIN, timed


# -- deadline, fetch ------------------------------------------------------------------------------------
def test_deadlines_nest_and_the_sooner_one_wins() -> None:
    assert time_left() is None
    with deadline(10.0):
        with deadline(100.0):
            left = time_left()
            assert left is not None and 9.0 < left <= 10.0
        with deadline(0.5):
            left = time_left()
            assert left is not None and left <= 0.5
        left = time_left()
        assert left is not None and left > 9.0
    assert time_left() is None
    with pytest.raises(ValueError), deadline(float("inf")):
        pass


def test_fetch_checks_the_deadline_between_chunks_of_a_transport_of_ones_own() -> None:
    class Slow(httpx.SyncByteStream):
        def __iter__(self) -> Iterator[bytes]:
            for _ in range(100):
                time.sleep(0.1)
                yield b" "

    transport = httpx.MockTransport(lambda request: httpx.Response(200, stream=Slow()))
    with deadline_client(transport=transport) as client:
        err, took = timed(lambda: fetch(client, "GET", "http://x/", seconds=0.5))
    assert isinstance(err, httpx.ReadTimeout) and took < 0.5 + MARGIN


def test_fetch_refuses_an_answer_too_large() -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(200, content=b"x" * 5000))
    with deadline_client(transport=transport) as client:
        with pytest.raises(AnswerTooLarge):
            fetch(client, "GET", "http://x/", seconds=5, max_bytes=4096)
        assert fetch(client, "GET", "http://x/", seconds=5, max_bytes=5000).content == b"x" * 5000


def test_fetch_returns_the_decoded_answer() -> None:
    import gzip

    body = gzip.compress(b'{"slots": 4}')
    headers = {"content-encoding": "gzip", "content-type": "application/json"}
    transport = httpx.MockTransport(lambda request: httpx.Response(200, content=body, headers=headers))
    with deadline_client(transport=transport) as client:
        response = fetch(client, "GET", "http://x/pools", seconds=5)
    assert response.json() == {"slots": 4} and response.request.url.path == "/pools"


def test_every_transport_of_a_client_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    # proxies from the environment get transports of their own: they are bounded as well
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    with deadline_client() as client:
        transports = [client._transport, *(t for t in client._mounts.values() if t is not None)]
        assert len(transports) >= 2
        assert all(
            isinstance(t._pool._network_backend, deadline_module._Backend)  # type: ignore[attr-defined]
            for t in transports
        )
