"""The control views in this process (Django's async test client): what the asking side answers by itself."""

from __future__ import annotations

import pytest

from tests.support.server import free_port

pytestmark = pytest.mark.django_db


async def test_a_call_held_elsewhere_is_a_503_that_says_so_while_redis_is_away(settings, async_client):
    """Nothing listens on the Redis port: the request cannot reach the cluster, which is neither a 404 (the call
    may well exist) nor a wait."""
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"
    settings.CHANNEL_LAYERS = {
        "default": {"BACKEND": "channels_redis.core.RedisChannelLayer", "CONFIG": {"hosts": [settings.REDIS_URL]}}
    }
    response = await async_client.post(
        "/v1/realtime/calls/rtc_elsewhere/accept", {"type": "realtime"}, content_type="application/json"
    )
    assert response.status_code == 503
    assert response.json()["error"]["type"] == "server_error"
    assert response["Retry-After"] == "1"


async def test_a_body_that_is_not_a_json_object_or_carries_a_huge_number_is_a_400_before_any_call_is_looked_up(
    async_client,
):
    for body, message in (
        ("[1, 2]", "must be a JSON object"),
        ("{", "not valid JSON"),
        ('{"status_code": 100000000000000000000000}', "out of range"),  # more than msgpack carries
    ):
        response = await async_client.post("/v1/realtime/calls/rtc_x/reject", body, content_type="application/json")
        assert response.status_code == 400, body
        assert message in response.json()["error"]["message"]
    response = await async_client.post("/v1/realtime/calls/rtc_x/reject", "{}", content_type="application/json")
    assert response.status_code == 404  # a good body: then the call, which is nowhere
    assert response.json()["error"]["code"] == "call_not_found"
