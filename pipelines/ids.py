"""Identifiers in the style of the Realtime API (``item_...``, ``resp_...``)."""

from __future__ import annotations

import secrets
import string

_ALPHABET = string.ascii_letters + string.digits


def new_id(prefix: str) -> str:
    return prefix + "_" + "".join(secrets.choice(_ALPHABET) for _ in range(20))
