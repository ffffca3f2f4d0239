"""Numbers, units and symbols: in words for the voice, as written for the transcript (``pipelines.spoken``)."""

from __future__ import annotations

import numpy as np
import pytest

from pipelines import audio
from pipelines.messages import AudioOut, TextForSpeech
from pipelines.spoken import for_reading, for_speech
from pipelines.stages.base import SessionContext
from pipelines.stages.tts import TtsStage
from pipelines.text import SentenceSplitter


@pytest.mark.parametrize(
    ("written", "said"),
    [
        ("Paris has about 2,600,000 people.", "Paris has about two million six hundred thousand people."),
        ("approximately 2, 600,000 people", "approximately two million six hundred thousand people"),
        ("It is 3.5 km away.", "It is three point five kilometers away."),
        ("It weighs 1 kg.", "It weighs one kilogram."),
        ("Drive at 100 km/h.", "Drive at one hundred kilometers per hour."),
        ("It is 21 °C, or -5°C at night.", "It is twenty-one degrees Celsius, or minus five degrees Celsius at night."),
        ("About 50% of them.", "About fifty percent of them."),
        ("A ticket is $2.50, a coffee £1.", "A ticket is two dollars and fifty cents, a coffee one pound."),
        ("It cost $3 million.", "It cost three million dollars."),
        ("Meet at 3:30 or at 10:00.", "Meet at three thirty or at ten o'clock."),
        ("The 21st century began in 2001.", "The twenty-first century began in two thousand and one."),
        ("Music of the 1990s.", "Music of the nineteen nineties."),
        ("Pages 10-20 & 30.", "Pages ten to twenty and thirty."),
        ("2+2=4", "two plus two equals four"),
        ("No numbers here.", "No numbers here."),
    ],
)
def test_the_voice_reads_numbers_units_and_symbols_in_words(written, said):
    assert for_speech(written) == said


@pytest.mark.parametrize(
    ("written", "said"),
    [
        ("**Safety** comes first.", "Safety comes first."),
        ("### Staying healthy\n- Drink *clean* water.", "Staying healthy Drink clean water."),
        ("1. Rest well.\n2) Eat __well__.", "Rest well. Eat well."),
        ("See [the guide](https://example.com/guide) and `pip`.", "See the guide and pip."),
        ("> A quote\n---\n~~old~~ new", "A quote old new"),
        ("| Day | Weather |\n|---|:---:|\n| Monday | Rain |", "Day, Weather Monday, Rain"),
        ("Item #1 costs $2.", "Item number one costs two dollars."),  # a lone # is still a word
        ("snake_case stays", "snake_case stays"),
    ],
)
def test_no_markup_reaches_the_voice_but_its_words_do(written, said):
    assert for_speech(written) == said
    assert for_reading(written) == written  # the transcript keeps what the model wrote


def test_the_transcript_keeps_the_written_form_and_only_joins_a_number_split_by_a_stray_space():
    assert for_reading("approximately 2, 600,000 people") == "approximately 2,600,000 people"
    assert for_reading("It is 21 °C and costs $2.50.") == "It is 21 °C and costs $2.50."
    assert for_reading("pick 1, 2, 3") == "pick 1, 2, 3"  # a list stays a list


def pieces(tokens: list[str]) -> list[str]:
    splitter = SentenceSplitter()
    out = [piece for token in tokens for piece in splitter.feed(token)]
    return out + ([rest] if (rest := splitter.flush()) else [])


def test_the_splitter_never_cuts_a_number_at_its_comma():
    # streamed as a small model's tokenizer gives it: digits one by one, the comma, a stray space
    tokens = ["There", " are", " about", " 2", ",", " ", "600", ",000", " people", " there", "."]
    assert all(not piece.endswith("2,") for piece in pieces(tokens)), pieces(tokens)
    assert pieces(["In", " 2020", ", ", "we", " went", " there", " twice", "."])[0] == "In 2020,"  # a clause still is


class RecordingVoice:
    """A FAKE synthesizer: records what it is asked to read and gives 100 ms of silence."""

    sample_rate = 24000

    def __init__(self) -> None:
        self.read: list[str] = []

    def synthesize(self, text, cancel=None, speed=1.0):
        self.read.append(text)
        yield np.zeros(2400, dtype=np.float32)


def test_the_tts_stage_reads_words_while_the_transcript_keeps_the_digits():
    voice = RecordingVoice()
    stage = TtsStage(SessionContext(), {"alloy": voice})
    text = "Paris has about 2,600,000 people and it is 21 °C."
    msg = TextForSpeech(generation=0, response_id="resp_1", text=text, voice="alloy", output_format=audio.PCM)
    out = [o for o in stage.process(msg) if isinstance(o, AudioOut)]
    said = "Paris has about two million six hundred thousand people and it is twenty-one degrees Celsius."
    assert voice.read == [said]
    assert out and out[0].transcript == text
