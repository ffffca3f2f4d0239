"""A phone call answered by the real default models: baresip asks a spoken question over G.711 and hears the answer."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

import numpy as np
import pytest

from tests.sip.conftest import loud_seconds, sip_server, wait_free
from tests.support.baresip import write_wav
from tests.support.polling import wait_for
from tests.support.server import LiveServer
from tests.support.speech import silence, spoken

QUESTION = "What is the capital of France?"
LEAD_S = 0.5


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[LiveServer]:
    live = sip_server(tmp_path_factory.mktemp("sip-real"), S2S_PIPELINE="real", S2S_POOL_SIZE="1")
    yield live
    live.stop()


def items(server: LiveServer) -> list[tuple[str, str]]:
    """(role, text) of every conversation item the audit kept, in order."""
    with sqlite3.connect(server.tmp_dir / "server.sqlite3") as db:
        return db.execute("SELECT role, text FROM realtime_conversationitem ORDER BY session_id, seq").fetchall()


def test_the_real_models_answer_a_spoken_question_on_the_phone(server, phones, tmp_path):
    question = spoken(QUESTION, 8000)
    microphone = write_wav(
        tmp_path / "question.wav", np.concatenate([silence(LEAD_S, 8000), question, silence(40, 8000)])
    )
    phone = phones(microphone)
    phone.dial(server.sip_uri)
    spoken_until = LEAD_S + len(question) / 8000

    def answer_heard() -> float:
        heard, rate = phone.heard()
        return loud_seconds(heard[int((spoken_until + 0.2) * rate) :], rate) >= 1.0

    wait_for(answer_heard, 180, what="the spoken answer heard by the phone")
    phone.hang_up()
    assert wait_free(server, 1) == 1
    said = wait_for(lambda: [text for role, text in items(server) if role == "user" and text], 15, what="transcript")
    assert "capital" in said[0].lower()  # Whisper heard the question through μ-law at 8 kHz
    answered = wait_for(lambda: [text for role, text in items(server) if role == "assistant" and text], 15)
    assert answered[0].strip()
