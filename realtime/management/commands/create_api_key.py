"""``manage.py create_api_key NAME [--supervisor]``: creates an API key and prints it, once (only its hash is kept).
``--supervisor`` makes a key that may supervise any live session (listen, whisper, take over, hand back)."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandParser

from realtime.access import auth


class Command(BaseCommand):
    help = "Create an API key for the Realtime endpoint. The key is printed once; only its hash is stored."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="Who or what will use the key (shown in the admin and the session records).")
        parser.add_argument(
            "--supervisor",
            action="store_true",
            help="The key may supervise ANY live session: listen, whisper, take over and hand back.",
        )

    def handle(self, *args: object, **options: object) -> None:
        key = self.create(str(options["name"]), supervisor=bool(options["supervisor"]))
        self.stdout.write(key)
        self.stderr.write(
            "Store this key now: it cannot be shown again. Clients send it as 'Authorization: Bearer KEY'."
        )

    def create(self, name: str, supervisor: bool = False) -> str:
        _, key = auth.create_api_key(name, supervisor)
        return key
