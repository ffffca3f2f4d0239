"""A turn's timeline: marks set once, offsets from the end of speech, spans that add up, in the order they happened."""

from __future__ import annotations

import pytest

from pipelines.timeline import SENT, Timeline, run_queue_s, spans


def test_each_mark_is_kept_the_first_time_and_is_given_after_the_end_of_speech():
    timeline = Timeline(speech_end_at=100.0)
    timeline.mark("speculation", 100.1)
    timeline.mark("speculation", 100.3)  # a later one changes nothing
    timeline.mark("stt_end", 100.4)
    timeline.add("tts_order_wait_s", 0.02)
    timeline.add("tts_order_wait_s", 0.03)
    marks = timeline.breakdown()
    assert marks["speech_end_at"] == 100.0
    assert marks["speculation"] == pytest.approx(0.1)
    assert marks["stt_end"] == pytest.approx(0.4)
    assert marks["tts_order_wait_s"] == pytest.approx(0.05)
    assert "decision" not in marks and "core_wait_s" not in marks  # not reached


def test_the_spans_run_in_the_order_the_marks_happened_and_add_up_to_the_last():
    timeline = Timeline(speech_end_at=10.0)
    for name, at in (("decision", 10.6), ("speculation", 10.1), ("stt_start", 10.15), ("emitted", 10.9)):
        timeline.mark(name, at)
    marks = timeline.breakdown() | {SENT: 0.95}
    result = spans(marks)
    assert [name for name, _, _ in result] == ["speculation", "stt_start", "decision", "emitted", SENT]
    assert sum(span for _, span, _ in result) == pytest.approx(0.95)
    assert result[2][1] == pytest.approx(0.45) and result[2][2] == pytest.approx(0.6)


def test_the_core_wait_is_measured_when_the_first_audio_leaves_the_unit():
    timeline = Timeline(speech_end_at=1.0)
    timeline.mark("emitted", 2.0)
    assert timeline.breakdown()["core_wait_s"] >= 0.0
    assert run_queue_s() > 0.0  # Linux's schedstat is there on the machines this runs on
