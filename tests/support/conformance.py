"""Every server event a test receives is checked against the openai SDK's own types.

Strict clients (the openai SDK's typed models, the Agents SDK) validate each server
event and turn a mismatch into an error; so does the suite. GA sessions are checked
against ``openai.types.realtime.RealtimeServerEvent``; sessions opened with
``OpenAI-Beta: realtime=v1`` (or the ``openai-beta.realtime-v1`` subprotocol) against
the beta union ``openai.types.beta.realtime.RealtimeServerEvent``, which the SDK still ships.
"""

from __future__ import annotations

import json
from typing import Any, Literal, get_args, get_origin

from openai.types.beta.realtime import RealtimeServerEvent as BetaServerEvent
from openai.types.realtime import RealtimeServerEvent
from openai.types.realtime.realtime_translation_server_event import RealtimeTranslationServerEvent
from pydantic import TypeAdapter, ValidationError

Event = dict[str, Any]

GA = TypeAdapter(RealtimeServerEvent)
BETA = TypeAdapter(BetaServerEvent)


def _by_type(union: Any) -> dict[str, TypeAdapter[Any]]:
    """Event type -> the one member of the SDK's union with that ``type`` literal (for short, exact errors)."""
    members = get_args(get_args(union)[0]) if get_args(union) and get_origin(get_args(union)[0]) else get_args(union)
    out: dict[str, TypeAdapter[Any]] = {}
    for model in members:
        annotation = model.model_fields["type"].annotation
        assert get_origin(annotation) is Literal, model
        for name in get_args(annotation):
            out[name] = TypeAdapter(model)
    return out


GA_TYPES = _by_type(RealtimeServerEvent)
BETA_TYPES = _by_type(BetaServerEvent)


class NonConforming(AssertionError):
    """A server event the SDK's types reject."""


def check(event: Event, beta: bool = False) -> Event:
    """Validates one server event (a decoded dict); raises :class:`NonConforming` naming what is wrong."""
    known = BETA_TYPES if beta else GA_TYPES
    if event.get("type") not in known:
        raise NonConforming(
            f"{'beta' if beta else 'GA'} server event type {event.get('type')!r} is not one the "
            f"openai SDK knows: {json.dumps(event)[:300]}"
        )
    try:
        known[event["type"]].validate_python(event)
        (BETA if beta else GA).validate_python(event)
    except ValidationError as exc:
        shown = json.dumps(event)[:600]
        raise NonConforming(
            f"{'beta' if beta else 'GA'} event {event.get('type')!r} does not validate against "
            f"the openai SDK's types: {exc}\nevent: {shown}"
        ) from None
    return event


def decode(text: str | bytes, beta: bool = False) -> Event:
    """Decodes one text frame from the server and validates it."""
    event = json.loads(text)
    assert isinstance(event, dict), f"a server frame that is not an object: {text!r:.200}"
    return check(event, beta)


# Translation sessions (/v1/realtime/translations): the SDK's own union of their server events.
TRANSLATION = TypeAdapter(RealtimeTranslationServerEvent)
TRANSLATION_TYPES = _by_type(RealtimeTranslationServerEvent)


def check_translation(event: Event) -> Event:
    """Validates one server event of a translation session against the SDK's translation types."""
    if event.get("type") not in TRANSLATION_TYPES:
        raise NonConforming(f"translation server event type {event.get('type')!r} is not one the openai SDK knows")
    try:
        TRANSLATION_TYPES[event["type"]].validate_python(event)
        TRANSLATION.validate_python(event)
    except ValidationError as exc:
        raise NonConforming(
            f"translation event {event.get('type')!r} does not validate against the openai SDK's types: {exc}\n"
            f"event: {json.dumps(event)[:600]}"
        ) from None
    return event
