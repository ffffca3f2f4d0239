"""Fixtures shared by the whole suite."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from pipelines.config import PoolConfig
from pipelines.factory import build_pool, synthetic_turn
from pipelines.pool import PipelinePool
from tests.support.server import LiveServer

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def need_service(name: str, url: str | None) -> str:
    """Returns the service URL; without one, skips locally and fails in CI."""
    if url:
        return url
    message = f"{name} is not configured (set S2S_TEST_{name.upper()}_URL)"
    if IN_CI:
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture
def redis_url() -> str:
    url = os.environ.get("S2S_TEST_REDIS_URL") or ("redis://127.0.0.1:6379/0" if not IN_CI else None)
    url = need_service("redis", url)
    import redis

    try:
        redis.Redis.from_url(url, socket_timeout=2).ping()
    except Exception as exc:
        if IN_CI:
            pytest.fail(f"Redis at {url} does not answer: {exc}")
        pytest.skip(f"Redis at {url} does not answer: {exc}")
    return url


@pytest.fixture
def postgres_url() -> str:
    url = os.environ.get("S2S_TEST_DATABASE_URL") or ("postgres://postgres@127.0.0.1:5432/test" if not IN_CI else None)
    url = need_service("database", url)
    import psycopg

    try:
        psycopg.connect(url.replace("postgres://", "postgresql://"), connect_timeout=3).close()
    except Exception as exc:
        if IN_CI:
            pytest.fail(f"PostgreSQL at {url} does not answer: {exc}")
        pytest.skip(f"PostgreSQL at {url} does not answer: {exc}")
    return url


@pytest.fixture(autouse=True)
def _auth_off_in_process(settings) -> None:
    """In-process tests connect without credentials, as a trusted local setup does (S2S_AUTH_REQUIRED=0).

    The default stays on; tests of authentication (tests/security/) turn it back on themselves.
    """
    settings.S2S_AUTH_REQUIRED = False


def make_loopback_pool(size: int = 2, release_timeout_s: float = 5.0) -> PipelinePool:
    pool = build_pool(PoolConfig(size=size, profile="loopback", release_timeout_s=release_timeout_s))
    pool.start(synthetic_turn)
    return pool


@pytest.fixture
def loopback_pool() -> Iterator[PipelinePool]:
    """A started pool of 2 FAKE-stage units, installed as the process's pool."""
    from realtime import runtime

    pool = make_loopback_pool()
    runtime.install(pool)
    yield pool
    runtime.install(None)
    pool.shutdown()


@pytest.fixture
def loopback_server(tmp_path) -> Iterator[LiveServer]:
    """A real ``manage.py serve`` process with the loopback profile and a pool of 2."""
    server = LiveServer(tmp_path).start()
    yield server
    server.stop()
