"""``realtime.call.incoming``: an incoming call announced to the operator's webhook, signed as OpenAI signs them.

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


async def announce(
    config: SipConfig, call_id: str, sip_headers: list[dict[str, str]], media_security: str = "rtp"
) -> bool:
    """Posts ``realtime.call.incoming`` to the webhook; True once it answered 2xx (tried twice, each bounded)."""
    event = incoming_event(call_id, sip_headers, media_security)
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
            logger.warning("SIP call %s: webhook attempt %s failed: %s", call_id, attempt, exc)
            continue
        if 200 <= response.status_code < 300:
            return True
        logger.warning("SIP call %s: webhook attempt %s answered %s", call_id, attempt, response.status_code)
    return False
