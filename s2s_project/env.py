"""Typed reading of the environment. A bad value stops the start with a clear message."""

from __future__ import annotations

import ipaddress
import json
import os

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def envstr(name: str, default: str) -> str:
    return os.environ.get(name, default)


def envbool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean (use 1/0, true/false, yes/no, on/off)")


def envint(name: str, default: int, minimum: int | None = None, maximum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not an integer") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={value} is below the minimum {minimum}")
    if maximum is not None and value > maximum:
        raise ImproperlyConfigured(f"{name}={value} is above the maximum {maximum}")
    return value


def envfloat(name: str, default: float, minimum: float | None = None, maximum: float | None = None) -> float:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a number") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={value} is below the minimum {minimum}")
    if maximum is not None and value > maximum:
        raise ImproperlyConfigured(f"{name}={value} is above the maximum {maximum}")
    return value


def envchoice(name: str, default: str, choices: tuple[str, ...]) -> str:
    value = os.environ.get(name, default).strip().lower()
    if value not in choices:
        raise ImproperlyConfigured(f"{name}={value!r} is not one of {', '.join(choices)}")
    return value


def envlist(name: str, default: tuple[str, ...]) -> tuple[str, ...]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return tuple(part.strip() for part in raw.split(",") if part.strip())


def envpairs(name: str) -> tuple[tuple[str, str], ...]:
    """``name=value,name=value`` pairs, e.g. voice names and their model paths."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return ()
    pairs = []
    for part in raw.split(","):
        key, sep, value = part.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise ImproperlyConfigured(f"{name}: {part!r} is not of the form name=value")
        pairs.append((key.strip(), value.strip()))
    return tuple(pairs)


def envicelist(name: str) -> tuple[dict[str, object], ...]:
    """ICE servers as a browser's ``RTCConfiguration.iceServers`` takes them: a JSON list of
    ``{"urls": ..., "username": ..., "credential": ...}``, or plain comma-separated ``stun:``/``turn:`` URLs."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return ()
    if raw[0] not in "[{":
        servers: list[object] = [{"urls": url} for url in envlist(name, ())]
    else:
        try:
            servers = json.loads(raw)
        except ValueError as exc:
            raise ImproperlyConfigured(f"{name} is not valid JSON: {exc}") from None
    if not isinstance(servers, list):
        raise ImproperlyConfigured(f"{name} must be a JSON list of ICE servers")
    checked: list[dict[str, object]] = []
    for server in servers:
        urls = server.get("urls") if isinstance(server, dict) else None
        urls = [urls] if isinstance(urls, str) else urls
        if (
            not isinstance(server, dict)
            or not urls
            or not all(isinstance(u, str) and u.split(":", 1)[0] in ("stun", "stuns", "turn", "turns") for u in urls)
        ):
            raise ImproperlyConfigured(f"{name}: {server!r} needs 'urls' of stun:, stuns:, turn: or turns: URLs")
        if any(u.startswith("turn") for u in urls) and not (server.get("username") and server.get("credential")):
            raise ImproperlyConfigured(f"{name}: the TURN server {urls[0]} needs a 'username' and a 'credential'")
        checked.append(server)
    return tuple(checked)


def envnetworks(name: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    """Comma-separated addresses or networks (``10.0.0.5, 10.1.0.0/16, ::1``)."""
    networks = []
    for part in envlist(name, ()):
        try:
            networks.append(ipaddress.ip_network(part, strict=False))
        except ValueError:
            raise ImproperlyConfigured(f"{name}: {part!r} is not an IP address or network") from None
    return tuple(networks)
