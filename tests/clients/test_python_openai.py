"""OpenAI's Python SDK as its users run it over ``wss://``: the beta client (``client.beta.realtime.connect``),
which dials wss whatever the base URL says, and the GA one; Python trusts the test's certificate authority
through ``SSL_CERT_FILE``."""

from __future__ import annotations

import asyncio
import time

from openai import AsyncOpenAI

QUESTION = "hello over tls"


async def typed_turn(connection, modalities: dict, timeout_s: float = 30) -> tuple[list[str], str, str]:
    """Sends the question, and returns the event types up to ``response.done``, the answer's text and status."""
    await connection.conversation.item.create(
        item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": QUESTION}]}
    )
    await connection.response.create(response=modalities)
    types: list[str] = []
    text = ""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        event = await asyncio.wait_for(connection.recv(), max(0.1, deadline - time.monotonic()))
        types.append(event.type)
        if event.type.endswith("text.delta"):
            text += event.delta
        if event.type == "response.done":
            return types, text, event.response.status
    raise AssertionError(f"no response.done in {timeout_s} s: {types}")


async def test_the_python_beta_client_answers_a_typed_turn_over_wss(tls_server, api_key, certs, monkeypatch):
    monkeypatch.setenv("SSL_CERT_FILE", str(certs.ca))
    client = AsyncOpenAI(api_key=api_key, base_url=f"{tls_server.http}/v1")
    async with client.beta.realtime.connect(model="gpt-4o-realtime-preview") as connection:
        types, text, status = await typed_turn(connection, {"modalities": ["text"]})
    assert types[0] == "session.created" and "response.text.delta" in types, types
    assert status == "completed" and QUESTION in text, (status, text)


async def test_the_python_ga_client_answers_a_typed_turn_over_wss(tls_server, api_key, certs, monkeypatch):
    monkeypatch.setenv("SSL_CERT_FILE", str(certs.ca))
    client = AsyncOpenAI(api_key=api_key, base_url=f"{tls_server.http}/v1")
    async with client.realtime.connect(model="gpt-realtime") as connection:
        types, text, status = await typed_turn(connection, {"output_modalities": ["text"]})
    assert types[0] == "session.created" and "response.output_text.delta" in types, types
    assert status == "completed" and QUESTION in text, (status, text)
