"""``manage.py pool_status``: a table of every node's slots, as published to the shared database."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from realtime.node import cluster

COLUMNS = ("node", "status", "unit", "state", "session", "for_s", "served", "rebuilds")


class Command(BaseCommand):
    help = "Show every node's pipeline units (state, session, for how long) from their heartbeats."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="Print the board as JSON.")

    def handle(self, *args: object, **options: Any) -> None:
        nodes = cluster.board()
        self.stdout.write(json.dumps(nodes, indent=2) if options["json"] else self.table(nodes))

    def table(self, nodes: list[dict[str, Any]]) -> str:
        """The board as aligned text columns, one row per unit."""
        if not nodes:
            return "No node has published its slots yet (is a server running against this database?)."
        rows = [COLUMNS]
        for node in nodes:
            for slot in node["slots"] or [{"index": "-", "state": "-", "sessions_served": "", "rebuilds": ""}]:
                rows.append(
                    (
                        node["name"],
                        node["status"],
                        str(slot["index"]),
                        slot["state"],
                        slot.get("session_id") or "" if slot["state"] != "idle" else "",
                        "" if slot.get("for_s") is None else f"{slot['for_s']:.1f}",
                        str(slot.get("sessions_served", "")),
                        str(slot.get("rebuilds", "")),
                    )
                )
        widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
        lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
        free = sum(node["free_units"] for node in nodes)
        total = sum(len(node["slots"]) for node in nodes if node["alive"])
        lines.append(f"\n{len(nodes)} node(s), {sum(n['alive'] for n in nodes)} alive; {free} of {total} units free.")
        return "\n".join(lines)
