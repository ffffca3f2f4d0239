"""Fixtures of the audit and cluster tests: a private PostgreSQL database, Redis, and sessions driven by clients."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support import services


@pytest.fixture(scope="module")
def module_redis_url() -> str:
    return services.redis_url()


@pytest.fixture(scope="module")
def private_database() -> Iterator[str]:
    """A fresh PostgreSQL database of its own (other test runs share the server), dropped afterwards."""
    with services.private_database("s2s_audit") as url:
        yield url
