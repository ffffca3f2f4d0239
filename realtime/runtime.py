"""The process's pipeline pool: built and started by the launcher, read by the consumer and the probes."""

from __future__ import annotations

import logging
import threading

from django.conf import settings

from pipelines.factory import build_pool, synthetic_turn
from pipelines.pool import PipelinePool

logger = logging.getLogger(__name__)

_pool: PipelinePool | None = None
_lock = threading.Lock()
_starting: threading.Thread | None = None
start_error: str | None = None


def get_pool() -> PipelinePool | None:
    return _pool


def install(pool: PipelinePool | None) -> None:
    """Makes ``pool`` the process's pool (tests install pools they built themselves)."""
    global _pool
    with _lock:
        _pool = pool


def start(background: bool = True, warm: bool = True) -> threading.Thread | None:
    """Loads the models, builds the pool from settings and warms every unit.

    In the background the server can answer probes (and turn sessions away with
    a clear error) while the models load.
    """
    global _starting

    def run() -> None:
        global start_error
        try:
            pool = build_pool(settings.S2S_POOL, progress=lambda text: logger.info("pool: %s", text))
            install(pool)
            timings = pool.start(synthetic_turn if warm else None, progress=lambda text: logger.info("pool: %s", text))
            for index, unit_timings in timings.items():
                logger.info("pool: unit %s warm: %s", index,
                            ", ".join(f"{k}={v * 1000:.0f}ms" for k, v in unit_timings.items()))
            logger.info("pool: %s units ready (%s profile)", len(pool.units), settings.S2S_POOL.profile)
        except Exception as exc:
            start_error = f"{type(exc).__name__}: {exc}"
            logger.exception("the pipeline pool failed to start")

    if not background:
        run()
        return None
    _starting = threading.Thread(target=run, name="pool-start", daemon=True)
    _starting.start()
    return _starting


def stop() -> None:
    pool = get_pool()
    if pool is not None:
        pool.shutdown()
