from __future__ import annotations

import json

import pytest
from channels.testing import WebsocketCommunicator

from s2s_project.asgi import application


@pytest.mark.django_db(transaction=True)
async def test_it_sends_session_created_on_connect(loopback_pool):
    comm = WebsocketCommunicator(application, "/v1/realtime?model=gpt-realtime", subprotocols=["realtime"])
    connected, subprotocol = await comm.connect()
    assert connected and subprotocol == "realtime"
    event = json.loads(await comm.receive_from(timeout=5))
    assert event["type"] == "session.created"
    assert event["session"]["model"] == "gpt-realtime"
    await comm.disconnect()
