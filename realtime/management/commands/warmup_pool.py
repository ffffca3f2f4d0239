"""``manage.py warmup_pool``: load the models and run one synthetic turn through every unit."""

from __future__ import annotations

import time
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from pipelines.config import PoolConfig
from pipelines.errors import ModelLoadError
from pipelines.factory import build_pool, synthetic_turn


class Command(BaseCommand):
    help = "Load the pipeline models, run one synthetic spoken turn through every unit, print per-stage timings."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--size", type=int, default=None, help="Units to warm (default: S2S_POOL_SIZE).")

    def handle(self, *args: Any, **options: Any) -> None:
        config: PoolConfig = settings.S2S_POOL
        if options["size"]:
            from dataclasses import replace

            config = replace(config, size=options["size"])
        try:
            report = self.warm(config)
        except (ModelLoadError, RuntimeError, TimeoutError, OSError) as exc:
            raise CommandError(f"warm-up failed: {exc}") from exc
        self.stdout.write(self.style.SUCCESS(f"{config.size} unit(s) warm in {report['total_s']:.1f}s"))

    def warm(self, config: PoolConfig) -> dict[str, Any]:
        """Builds and warms a pool; returns the timings (tests call this directly)."""
        started = time.perf_counter()
        pool = build_pool(config, progress=self._progress)
        load_s = time.perf_counter() - started
        self.stdout.write(f"models loaded in {load_s:.1f}s ({config.profile} profile)")
        try:
            units = pool.start(synthetic_turn, progress=self._progress)
        finally:
            pool.shutdown()
        for index, timings in units.items():
            line = ", ".join(
                f"{name.removesuffix('_s')}={value * 1000:.0f}ms" for name, value in sorted(timings.items())
            )
            self.stdout.write(f"unit {index}: {line}")
        return {"load_s": load_s, "units": units, "total_s": time.perf_counter() - started}

    def _progress(self, text: str) -> None:
        self.stdout.write(f"... {text}")
        self.stdout.flush()
