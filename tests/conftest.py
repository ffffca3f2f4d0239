"""Fixtures shared by the whole suite."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from pipelines.config import PoolConfig
from pipelines.factory import build_pool, synthetic_turn
from pipelines.pool import PipelinePool
from tests.support import services
from tests.support.server import LiveServer

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix, tmp_path_factory) -> None:
    """The test database is a SQLite file, as the embedded default is, not Django's shared-cache memory database.

    In shared-cache mode SQLite locks tables and a writer that meets another thread's write fails at once
    ("database table is locked"), ignoring the busy timeout; a file in WAL mode waits, as production does.
    """
    from django.conf import settings

    database = settings.DATABASES["default"]
    if database["ENGINE"] == "django.db.backends.sqlite3":
        database.setdefault("TEST", {})["NAME"] = str(tmp_path_factory.mktemp("database") / "test.sqlite3")


@pytest.fixture
def redis_url() -> str:
    return services.redis_url()


@pytest.fixture
def postgres_url() -> str:
    return services.postgres_url()


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
    from realtime.node import runtime

    pool = make_loopback_pool()
    runtime.current().install(pool)
    yield pool
    runtime.current().install(None)
    pool.shutdown()


@pytest.fixture
def loopback_server(tmp_path) -> Iterator[LiveServer]:
    """A real ``manage.py serve`` process with the loopback profile and a pool of 2."""
    server = LiveServer(tmp_path).start()
    yield server
    server.stop()
