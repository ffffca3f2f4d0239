"""``manage.py create_api_key NAME``: creates an API key and prints it, once (only its hash is kept)."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandParser

from realtime.access import auth


class Command(BaseCommand):
    help = "Create an API key for the Realtime endpoint. The key is printed once; only its hash is stored."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="Who or what will use the key (shown in the admin and the session records).")

    def handle(self, *args: object, **options: object) -> None:
        key = self.create(str(options["name"]))
        self.stdout.write(key)
        self.stderr.write(
            "Store this key now: it cannot be shown again. Clients send it as 'Authorization: Bearer KEY'."
        )

    def create(self, name: str) -> str:
        _, key = auth.create_api_key(name)
        return key
