"""Fixtures of the audit and cluster tests: a private PostgreSQL database, Redis, and sessions driven by clients."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.support import services


def with_database(url: str, name: str) -> str:
    """The same server URL, another database."""
    base, _, _ = url.rpartition("/")
    return f"{base}/{name}"


@pytest.fixture(scope="module")
def module_postgres_url() -> str:
    return services.postgres_url()


@pytest.fixture(scope="module")
def module_redis_url() -> str:
    return services.redis_url()


@pytest.fixture(scope="module")
def private_database(module_postgres_url: str) -> Iterator[str]:
    """A fresh PostgreSQL database of its own (other test runs share the server), dropped afterwards."""
    import psycopg

    name = f"s2s_audit_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(services.libpq(module_postgres_url), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield with_database(module_postgres_url, name)
    with psycopg.connect(services.libpq(module_postgres_url), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
