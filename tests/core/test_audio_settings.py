"""Audio settings a client sends reach the stages (loopback profile: its TTS plays 60 ms of tone per word,
divided by the speed)."""

from __future__ import annotations

import pytest

from pipelines import audio
from tests.support.client import audio_bytes

pytestmark = pytest.mark.django_db(transaction=True)


async def _reply_ms(client) -> int:
    await client.say_text("hello sound")
    events = await client.collect("response.done")
    return audio.duration_ms(len(audio_bytes(events)), audio.PCM)


@pytest.mark.parametrize(("speed", "expected_ms"), [(1.0, 240), (1.5, 160), (0.25, 960)])
async def test_the_sessions_speed_reaches_the_voice(connect, speed, expected_ms):
    client = await connect()
    updated = await client.update_session(audio={"output": {"speed": speed}})
    assert updated["session"]["audio"]["output"]["speed"] == speed
    assert abs(await _reply_ms(client) - expected_ms) <= 2


async def test_a_speed_change_applies_to_the_next_response(connect):
    client = await connect()
    assert abs(await _reply_ms(client) - 240) <= 2
    await client.update_session(audio={"output": {"speed": 1.5}})
    assert abs(await _reply_ms(client) - 160) <= 2
