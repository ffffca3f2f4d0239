"""The Coqui TTS backend through the whole server, with a model loaded as an operator's would be."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pipelines import audio
from tests.pipeline.conftest import ask_in_text, connect
from tests.support.coqui import build_tiny_vits
from tests.support.server import LiveServer

pytestmark = pytest.mark.real_models


@pytest.fixture(scope="module")
def coqui_server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("coqui")
    checkpoint, config = build_tiny_vits(folder / "model")
    server = LiveServer(
        folder,
        env={
            "S2S_PIPELINE": "real",
            "S2S_POOL_SIZE": "1",
            "S2S_TTS_BACKEND": "coqui",
            "S2S_TTS_MODEL": str(checkpoint),
            "S2S_TTS_CONFIG": str(config),
        },
    )
    server.start(ready_timeout=900)
    yield server, json.loads(config.read_text())["audio"]["sample_rate"]
    server.stop()


async def test_the_coqui_backend_streams_audio_deltas_in_the_session_format(coqui_server):
    server, model_rate = coqui_server
    ws = await connect(server)
    try:
        turn = await ask_in_text(ws, "Say good morning.", timeout=120)
    finally:
        await ws.close()
    done = turn.first("response.done")["response"]
    assert done["status"] in ("completed", "incomplete"), done
    deltas = [e for e in turn.events if e["type"] == "response.output_audio.delta"]
    assert len(deltas) >= 2  # streamed in small pieces, not one blob
    samples = audio.decode(turn.audio(), audio.PCM)
    transcript = done["output"][0]["content"][0]["transcript"]
    # Resampled from the model's rate to 24 kHz: a plausible length for the text spoken.
    assert model_rate != audio.RATES[audio.PCM]
    seconds = len(samples) / audio.RATES[audio.PCM]
    assert 0.05 * len(transcript.split()) < seconds < 5.0 * max(1, len(transcript.split()))
    assert np.isfinite(samples).all() and np.abs(samples).max() > 0
