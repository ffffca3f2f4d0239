"""What the admin's session page shows: facts, the summary in words, a latency chart, each turn's timings, and who
supervised it (issue 51)."""

from __future__ import annotations

import statistics
from typing import Any

from django.urls import reverse
from django.utils import timezone

from pipelines.timeline import spans
from realtime.admin.supervise import supervision
from realtime.admin.translation import kind_of, phrases
from realtime.models import REQUEST_TO_AUDIO, TYPED_LATENCY, RealtimeSession, Recording, ResponseRecord, Stage

# A turn's breakdown (pipelines/timeline.py): each span named by the moment that ends it.
SPANS = {
    "speculation": "sent ahead to STT",
    "stt_start": "STT thread took it",
    "stt_end": "transcribed",
    "lm_start": "LM thread took it",
    "lm_first_token": "first token",
    "lm_first_piece": "first words",
    "tts_start": "TTS thread took them",
    "tts_first_audio": "first audio made",
    "decision": "turn over (speech_stopped)",
    "emitted": "released to the session",
    "sent": "sent to the client",
}
WAITS = (("tts_order_wait_s", "of which waiting for a TTS slot"), ("core_wait_s", "threads waiting for a core"))
CHART_W, CHART_H, CHART_PAD = 480, 200, 34  # the SVG scales to its column: its text stays readable at 480 wide
TYPED = "– (typed: no end of speech to time from)"
EMPTY_WORDS = {  # an item with no text, by what became of its response
    "cancelled": "(cancelled before it said anything)",
    "incomplete": "(cut short before it said anything)",
    "failed": "(failed before it said anything)",
}


def when(moment: Any) -> str:
    return "" if moment is None else timezone.localtime(moment).strftime("%Y-%m-%d %H:%M:%S")


def ms(seconds: float | None) -> str:
    return "–" if seconds is None else f"{seconds * 1000:.0f} ms"


def session_detail(session: RealtimeSession) -> dict[str, Any]:
    responses = list(session.responses.order_by("finished_at"))
    # A live session (or one the summary task has not reached yet) is summarized as it stands, turn by turn.
    # Imported here, not at the top: the admin loads at start, and the process must not import the Celery tasks
    # before the beat's first round does (tests/audit/test_admin.py, the embedded beat).
    from realtime.tasks import summarize

    summary = session.summary or summarize(session.id) or {}
    return {
        "facts": facts(session, responses),
        "summary_rows": summary_rows(summary),
        "summary": summary,
        "summarized": session.summary is not None,
        "turns": turns(session, responses),
        "chart": chart(responses),
        "phrases": phrases(session),  # a translation's: source beside translation
        "supervision": supervision(session),  # issue 51: who listened, whispered, took over
    }


def facts(session: RealtimeSession, responses: list[ResponseRecord]) -> list[tuple[str, str]]:
    duration = "still live" if session.duration_s is None else f"{session.duration_s:.1f} s"
    close = "" if session.close_code is None else f" (close code {session.close_code})"
    said = session.items.filter(role="user").count()
    model = session.engines or session.model or "–"
    if session.engines and session.model:
        model = f"{session.engines} (the client asked for {session.model})"
    return [
        ("Started", when(session.started_at)),
        ("Ended", when(session.ended_at) or "–"),
        ("Duration", duration),
        ("Ended how", f"{session.get_end_reason_display()}{close}"),
        ("Messages", f"{said} from the user ({session.turns} spoken) · {len(responses)} answers"),
        ("Errors", str(session.errors)),
        *([("Unit rebuilt", session.unit_rebuild)] if session.unit_rebuild else []),  # it could not drain: why
        ("Who", session.principal or "–"),
        ("Client", f"{session.client_addr or '–'} · {session.user_agent or '–'}"),
        ("Transport", session.get_transport_display()),
        ("Kind", kind_of(session)),
        ("Node and unit", f"{session.node} · unit {session.unit_index if session.unit_index is not None else '–'}"),
        ("Models", model),
        ("Audio", f"{session.audio_in_seconds:.1f} s in · {session.audio_out_seconds:.1f} s out"),
    ]


def summary_rows(summary: dict[str, Any] | None) -> list[dict[str, str]]:
    """One row per stage with its percentiles in milliseconds (the table's heading says the unit: the figures
    alone fit a phone's 360 px)."""
    latency = (summary or {}).get("latency_s", {})
    rows = []
    typed_turns = (latency.get(TYPED_LATENCY) or {}).get("count")
    typed = [(TYPED_LATENCY, "Typed: request to first audio")] if typed_turns else []
    for key, label in [(stage.value, stage.label) for stage in Stage] + typed:
        values = latency.get(key) or {}
        rows.append(
            {
                "label": label,
                "count": str(values.get("count", 0)),
                **{q: ms(values.get(q)).removesuffix(" ms") for q in ("p50", "p90", "p99", "max")},
            }
        )
    return rows


def turns(session: RealtimeSession, responses: list[ResponseRecord]) -> list[dict[str, Any]]:
    """The transcript, each assistant item with its response's timings, each item with its recording."""
    by_item = {r.item_id: r for r in responses if r.item_id}
    audio = {r.item_id: r for r in Recording.objects.filter(session=session)}
    rows = []
    for item in session.items.order_by("seq"):
        response = by_item.get(item.item_id)
        recording = audio.get(item.item_id)
        rows.append(
            {
                "item": item,
                "empty": EMPTY_WORDS.get(response.status, "(nothing said)") if response else "(nothing transcribed)",
                "time": timezone.localtime(item.created_at).strftime("%H:%M:%S"),
                "response": response,
                "timings": None if response is None else timings(response),
                "recording_url": None
                if recording is None
                else reverse("admin:realtime_recording", args=[session.id, recording.pk]),
                "recording_ms": None if recording is None else recording.duration_ms,
            }
        )
    return rows


def timings(response: ResponseRecord) -> list[tuple[str, str]]:
    """A response's stage figures, then its turn's breakdown: the spans as they happened (they add up to the
    last), and what the turn waited for. A typed turn has no end of speech to time from: said so, not "–"."""
    typed = response.voice_to_voice_s is None and response.stt_s is None
    asked = (response.breakdown or {}).get(REQUEST_TO_AUDIO)
    said = {Stage.VOICE_TO_VOICE: TYPED if asked is None else f"{ms(asked)} (typed: from the request)"} if typed else {}
    said |= {Stage.STT: "– (typed)"} if typed else {}
    rows = [(stage.label, said.get(stage) or ms(getattr(response, stage.field))) for stage in Stage]
    marks = response.breakdown or {}
    for name, span, at in spans(marks):
        rows.append((f"+ {SPANS.get(name, name)}", f"{ms(span)} (at {ms(at)})"))
    rows += [(label, ms(marks[key])) for key, label in WAITS if key in marks]
    return rows


def chart(responses: list[ResponseRecord]) -> dict[str, Any] | None:
    """Bars of end-of-speech-to-audio per turn, as SVG coordinates (drawn by the template)."""
    values = [(n, r.voice_to_voice_s) for n, r in enumerate(responses, 1) if r.voice_to_voice_s is not None]
    if not values:
        return None
    top = max(v for _, v in values) * 1.15 or 1.0
    inner_w, inner_h = CHART_W - 2 * CHART_PAD, CHART_H - 2 * CHART_PAD
    step = inner_w / len(values)
    bar_w = max(2.0, min(40.0, step * 0.7))
    bars = []
    for index, (turn, value) in enumerate(values):
        height = inner_h * value / top
        x = CHART_PAD + index * step + (step - bar_w) / 2
        bars.append(
            {
                "x": round(x, 1),
                "y": round(CHART_PAD + inner_h - height, 1),
                "w": round(bar_w, 1),
                "h": round(height, 1),
                "label": f"turn {turn}: {value * 1000:.0f} ms",
                "turn": turn,
                "cx": round(x + bar_w / 2, 1),
            }
        )
    median = statistics.median(v for _, v in values)
    median_y = round(CHART_PAD + inner_h - inner_h * median / top, 1)
    return {
        "width": CHART_W,
        "height": CHART_H,
        "pad": CHART_PAD,
        "bars": bars,
        "base_y": CHART_PAD + inner_h,
        "right": CHART_W - CHART_PAD,
        "top_label": f"{top * 1000:.0f} ms",
        "median_y": median_y,
        "median_label": f"median {median * 1000:.0f} ms",
        "label_y": CHART_H - 10,
    }
