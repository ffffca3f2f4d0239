"""LiveKit Agents' ``openai.realtime.RealtimeModel`` (livekit-agents and livekit-plugins-openai, pinned in
requirements.txt) against the server over ``wss://``, driven as an agent's session drives it: a spoken turn
(microphone frames, a commit, the reply's audio and transcript) and a tool turn (the model's call, the
tool's output, the answer made of it). The loopback profile answers; the protocol is what is tested."""

from __future__ import annotations

import asyncio
import json
import ssl

import aiohttp
import numpy as np
from livekit import rtc
from livekit.agents import llm
from livekit.plugins import openai as lk_openai

RATE = 24000
TIMEOUT_S = 20


async def reply(session: llm.RealtimeSession) -> tuple[str, int, list[llm.FunctionCall]]:
    """The next generation's transcript, its audio samples and the calls it made."""
    generation = await asyncio.wait_for(session.generate_reply(), TIMEOUT_S)
    text, samples = "", 0
    async for message in generation.message_stream:
        async for delta in message.text_stream:
            text += str(delta)
        async for frame in message.audio_stream:
            samples += frame.samples_per_channel
    calls = [call async for call in generation.function_stream]
    return text, samples, calls


def frames(seconds: float, amplitude: float) -> list[rtc.AudioFrame]:
    """20 ms frames of a 220 Hz tone (the loopback VAD hears anything loud as speech), or silence."""
    t = np.arange(int(seconds * RATE)) / RATE
    pcm = (amplitude * 32767 * np.sin(2 * np.pi * 220 * t)).astype(np.int16)
    step = RATE // 50
    return [rtc.AudioFrame(pcm[i : i + step].tobytes(), RATE, 1, step) for i in range(0, len(pcm) - step + 1, step)]


async def test_livekit_realtime_model_does_a_spoken_turn_and_a_tool_turn_over_wss(tls_server, api_key, certs):
    context = ssl.create_default_context(cafile=str(certs.ca))
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as http:
        model = lk_openai.realtime.RealtimeModel(
            base_url=f"{tls_server.http}/v1", api_key=api_key, http_session=http, turn_detection=None
        )
        session = model.session()
        try:
            errors: list[str] = []
            session.on("error", lambda event: errors.append(str(event.error)))

            for frame in frames(1.0, 0.3) + frames(0.3, 0.0):
                session.push_audio(frame)
            session.commit_audio()
            text, samples, _ = await asyncio.wait_for(reply(session), TIMEOUT_S)
            assert text.strip() and samples > RATE // 10, (text, samples, errors)

            @llm.function_tool
            async def get_weather(city: str) -> str:
                """The weather in a city."""
                return f"sunny in {city}"

            await session.update_tools([get_weather])
            chat = session.chat_ctx.copy()
            chat.add_message(role="user", content='call get_weather {"city": "Paris"}')
            await session.update_chat_ctx(chat)
            _, _, calls = await asyncio.wait_for(reply(session), TIMEOUT_S)
            assert [call.name for call in calls] == ["get_weather"], (calls, errors)
            assert json.loads(calls[0].arguments) == {"city": "Paris"}

            chat = session.chat_ctx.copy()
            chat.items.append(
                llm.FunctionCallOutput(
                    call_id=calls[0].call_id, name="get_weather", output="sunny in Paris", is_error=False
                )
            )
            await session.update_chat_ctx(chat)
            text, samples, calls = await asyncio.wait_for(reply(session), TIMEOUT_S)
            assert "sunny in Paris" in text and samples > 0 and not calls, (text, errors)
            assert not errors, errors
        finally:
            await session.aclose()
            await model.aclose()
