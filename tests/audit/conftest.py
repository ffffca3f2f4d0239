"""Fixtures of the audit and cluster tests: a private PostgreSQL database, Redis, and sessions driven by clients."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from tests.conftest import IN_CI, need_service


def _check_postgres(url: str) -> None:
    import psycopg

    try:
        psycopg.connect(_libpq(url), connect_timeout=3).close()
    except Exception as exc:
        if IN_CI:
            pytest.fail(f"PostgreSQL at {url} does not answer: {exc}")
        pytest.skip(f"PostgreSQL at {url} does not answer: {exc}")


def _libpq(url: str) -> str:
    return url.replace("postgres://", "postgresql://", 1)


def with_database(url: str, name: str) -> str:
    """The same server URL, another database."""
    base, _, _ = url.rpartition("/")
    return f"{base}/{name}"


@pytest.fixture(scope="module")
def module_postgres_url() -> str:
    url = os.environ.get("S2S_TEST_DATABASE_URL") or ("postgres://postgres@127.0.0.1:5432/test" if not IN_CI else None)
    url = need_service("database", url)
    _check_postgres(url)
    return url


@pytest.fixture(scope="module")
def module_redis_url() -> str:
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


@pytest.fixture(scope="module")
def private_database(module_postgres_url: str) -> Iterator[str]:
    """A fresh PostgreSQL database of its own (other test runs share the server), dropped afterwards."""
    import psycopg

    name = f"s2s_audit_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(_libpq(module_postgres_url), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield with_database(module_postgres_url, name)
    with psycopg.connect(_libpq(module_postgres_url), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
