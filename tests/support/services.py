"""Redis and PostgreSQL for the tests: skipped locally when absent, a failure in CI (CI=true)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def need_service(name: str, url: str | None) -> str:
    """Returns the service URL; without one, skips locally and fails in CI."""
    if url:
        return url
    missing(f"{name} is not configured (set S2S_TEST_{name.upper()}_URL)")
    raise AssertionError("unreachable")


def missing(message: str) -> None:
    if IN_CI:
        pytest.fail(message)
    pytest.skip(message)


def redis_url() -> str:
    """The test Redis, after a ping."""
    url = need_service("redis", os.environ.get("S2S_TEST_REDIS_URL") or (None if IN_CI else "redis://127.0.0.1:6379/0"))
    import redis

    try:
        redis.Redis.from_url(url, socket_timeout=2).ping()
    except Exception as exc:
        missing(f"Redis at {url} does not answer: {exc}")
    return url


def postgres_url() -> str:
    """The test PostgreSQL server, after a connection."""
    url = need_service(
        "database",
        os.environ.get("S2S_TEST_DATABASE_URL") or (None if IN_CI else "postgres://postgres@127.0.0.1:5432/test"),
    )
    import psycopg

    try:
        psycopg.connect(libpq(url), connect_timeout=3).close()
    except Exception as exc:
        missing(f"PostgreSQL at {url} does not answer: {exc}")
    return url


def libpq(url: str) -> str:
    return url.replace("postgres://", "postgresql://", 1)


def with_database(url: str, name: str) -> str:
    """The same server URL, another database."""
    base, _, _ = url.rpartition("/")
    return f"{base}/{name}"


@contextmanager
def private_database(prefix: str) -> Iterator[str]:
    """A fresh PostgreSQL database of its own (other test runs share the server): its URL, dropped afterwards."""
    import psycopg

    url = postgres_url()
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(libpq(url), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield with_database(url, name)
    finally:
        with psycopg.connect(libpq(url), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
