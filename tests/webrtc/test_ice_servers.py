"""S2S_ICE_SERVERS: what the server's peer connections and the page are given."""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import ImproperlyConfigured

from realtime.transports.webrtc.call import ice_servers
from s2s_project.env import envicelist

TURN = {"urls": ["turn:turn.example.org:3478"], "username": "s2s", "credential": "secret"}


def test_ice_servers_are_a_json_list_or_plain_stun_urls(monkeypatch):
    monkeypatch.setenv("S2S_ICE_SERVERS", json.dumps([{"urls": "stun:stun.example.org:3478"}, TURN]))
    assert envicelist("S2S_ICE_SERVERS") == ({"urls": "stun:stun.example.org:3478"}, TURN)
    monkeypatch.setenv("S2S_ICE_SERVERS", "stun:a.example.org:3478, stun:b.example.org")
    assert envicelist("S2S_ICE_SERVERS") == ({"urls": "stun:a.example.org:3478"}, {"urls": "stun:b.example.org"})
    monkeypatch.delenv("S2S_ICE_SERVERS")
    assert envicelist("S2S_ICE_SERVERS") == ()


@pytest.mark.parametrize(
    "value, says",
    [
        ("[{", "not valid JSON"),
        ('{"urls": "stun:x"}', "must be a JSON list"),
        ('[{"urls": "http://x"}]', "stun:, stuns:, turn: or turns:"),
        ('[{"urls": ["turn:x:3478"]}]', "needs a 'username' and a 'credential'"),
        ("turn:x:3478", "needs a 'username' and a 'credential'"),
    ],
)
def test_a_bad_ice_server_stops_the_start_with_a_clear_message(monkeypatch, value, says):
    monkeypatch.setenv("S2S_ICE_SERVERS", value)
    with pytest.raises(ImproperlyConfigured, match=says):
        envicelist("S2S_ICE_SERVERS")


def test_the_peer_connections_and_the_page_get_the_configured_servers(settings, client):
    settings.S2S_ICE_SERVERS = ({"urls": "stun:stun.example.org:3478"}, TURN)
    servers = ice_servers()
    assert [s.urls for s in servers] == ["stun:stun.example.org:3478", ["turn:turn.example.org:3478"]]
    assert servers[1].username == "s2s" and servers[1].credential == "secret"
    page = client.get("/").content.decode()
    assert 'data-calls-url="/v1/realtime/calls"' in page
    assert "stun:stun.example.org:3478" in page
