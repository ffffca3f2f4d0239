"""``manage.py serve``: build and warm the pool, then serve HTTP and WebSocket with daphne."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

from realtime.server.launcher import refuse_public_development_key, serve


class Command(BaseCommand):
    help = "Start the speech-to-speech server (daphne) with its pipeline pool."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--no-warmup", action="store_true", help="Skip the synthetic warm-up turn per unit.")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            refuse_public_development_key(str(options["host"]))
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from None
        serve(
            str(options["host"]),
            int(options["port"]),
            warm=not options["no_warmup"],
            verbosity=int(options["verbosity"]),
        )
