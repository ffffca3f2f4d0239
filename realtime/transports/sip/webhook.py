"""The operator's webhook: ``realtime.call.incoming`` (a call rings) and ``realtime.call.status_changed`` (an
outbound call's status changed), signed as OpenAI signs webhooks.

The signature is Standard Webhooks' (what the openai SDK's ``client.webhooks.unwrap`` checks):
``webhook-id``, ``webhook-timestamp`` and ``webhook-signature: v1,<base64 HMAC-SHA256 of
"{id}.{timestamp}.{body}">``, keyed with the base64 secret after ``whsec_``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import time
from typing import Any

import httpx2 as httpx

from pipelines.ids import new_id
from realtime.transports.sip.config import SipConfig

logger = logging.getLogger(__name__)

DELIVERY_TIMEOUT_S = 5.0
ATTEMPTS = 2
STATUS_CHANGED = "realtime.call.status_changed"  # an outbound call's status changed (no such event at OpenAI)


def sign(secret: str, webhook_id: str, timestamp: int, body: str) -> str:
    """The ``webhook-signature`` header's value for ``body``."""
    key = base64.b64decode(secret.removeprefix("whsec_")) if secret.startswith("whsec_") else secret.encode()
    digest = hmac.new(key, f"{webhook_id}.{timestamp}.{body}".encode(), hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def incoming_event(call_id: str, sip_headers: list[dict[str, str]], media_security: str = "rtp") -> dict[str, Any]:
    """The event as the openai SDK's ``RealtimeCallIncomingWebhookEvent`` reads it (``srtp``: the call's media is)."""
    return {
        "object": "event",
        "id": new_id("evt"),
        "type": "realtime.call.incoming",
        "created_at": int(time.time()),
        "data": {"call_id": call_id, "sip_headers": sip_headers, "sip_media_security": media_security},
    }


def status_event(record: dict[str, Any]) -> dict[str, Any]:
    """``realtime.call.status_changed``: an outbound call's record (``GET /v1/realtime/calls/{id}``'s body) as it
    stands after a change of status; ``data.call_id`` names the call as the incoming event does."""
    return {
        "object": "event",
        "id": new_id("evt"),
        "type": STATUS_CHANGED,
        "created_at": int(time.time()),
        "data": {"call_id": record["id"], **record},
    }


async def announce(
    config: SipConfig, call_id: str, sip_headers: list[dict[str, str]], media_security: str = "rtp"
) -> bool:
    """Posts ``realtime.call.incoming`` to the webhook; True once it answered 2xx (tried twice, each bounded)."""
    return await deliver(config, incoming_event(call_id, sip_headers, media_security), f"SIP call {call_id}")


async def deliver(config: SipConfig, event: dict[str, Any], what: str) -> bool:
    """Posts ``event`` to ``S2S_SIP_WEBHOOK_URL``, signed; True once it answered 2xx (tried twice, each bounded)."""
    body = json.dumps(event)
    for attempt in range(1, ATTEMPTS + 1):
        timestamp = int(time.time())
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "s2s-realtime webhooks",
            "webhook-id": event["id"],
            "webhook-timestamp": str(timestamp),
            "webhook-signature": sign(config.webhook_secret, event["id"], timestamp, body),
        }
        try:
            async with httpx.AsyncClient(timeout=DELIVERY_TIMEOUT_S, follow_redirects=False) as client:
                response = await client.post(config.webhook_url, content=body.encode(), headers=headers)
        except httpx.HTTPError as exc:
            logger.warning("%s: webhook attempt %s failed: %s", what, attempt, exc)
            continue
        if 200 <= response.status_code < 300:
            return True
        logger.warning("%s: webhook attempt %s answered %s", what, attempt, response.status_code)
    return False
