"""Models, admin, tasks and ``pool_status`` against the database (SQLite here; PostgreSQL in the rerun below)."""

from __future__ import annotations

import csv
import io
import os
import subprocess
import sys
import time
import uuid
import wave
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.contrib.auth.models import Group, User
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from pipelines import audio, messages as m
from pipelines.config import EngineConfig
from realtime import tasks
from realtime.access.auth import create_api_key
from realtime.apps import AUDITORS_GROUP
from realtime.audit import recordings
from realtime.management.commands.pool_status import Command as PoolStatus
from realtime.models import ConversationItem, EndReason, Node, RealtimeSession, Recording, ResponseRecord, Stage
from realtime.node import cluster
from realtime.protocol.client_events import InputAudioAppend
from realtime.views import installed_voices
from tests.conftest import make_loopback_pool
from tests.support.services import with_database
from tests.support.speech import tone

ROOT = Path(__file__).resolve().parents[2]


def make_session(session_id: str = "sess_audit1", **fields) -> RealtimeSession:
    defaults = dict(
        node="node-a",
        unit_index=0,
        principal="key:ops",
        client_addr="10.0.0.7",
        user_agent="test",
        started_at=timezone.now() - timedelta(minutes=5),
        ended_at=timezone.now(),
        end_reason=EndReason.CLIENT_CLOSED,
        close_code=1000,
        turns=2,
    )
    session = RealtimeSession.objects.create(id=session_id, **{**defaults, **fields})
    lines = [
        ("user", "what is the weather in lisbon"),
        ("assistant", "It is sunny in Lisbon."),
        ("user", "and tomorrow"),
        ("assistant", "Rain, I am afraid."),
    ]
    for seq, (role, text) in enumerate(lines, 1):
        ConversationItem.objects.create(
            session=session, seq=seq, item_id=f"item_{seq}", role=role, text=text, audio_ms=900
        )
    for n, v2v in enumerate((0.4, 0.8), 1):
        ResponseRecord.objects.create(
            session=session,
            response_id=f"resp_{n}",
            item_id=f"item_{2 * n}",
            status="completed",
            input_tokens=20,
            output_tokens=6,
            audio_ms=1200,
            stt_s=0.1 * n,
            lm_first_token_s=0.05 * n,
            tts_first_audio_s=0.07 * n,
            voice_to_voice_s=v2v,
        )
    return session


@pytest.fixture
def auditor(db) -> User:
    user = User.objects.create_user("auditor", password="pw", is_staff=True)
    user.groups.add(Group.objects.get(name=AUDITORS_GROUP))
    return user


@pytest.mark.django_db
class TestSessionAudit:
    def test_the_list_filters_by_how_it_ended_and_searches_the_transcripts(self, admin_client):
        make_session()
        make_session("sess_other", end_reason=EndReason.REJECTED, close_code=1008, node="node-b")
        ConversationItem.objects.filter(session_id="sess_other").delete()
        page = admin_client.get("/admin/realtime/realtimesession/", {"end_reason__exact": "rejected"}).content.decode()
        assert "sess_other" in page and "sess_audit1" not in page
        page = admin_client.get("/admin/realtime/realtimesession/", {"q": "lisbon"}).content.decode()
        assert "sess_audit1" in page and "sess_other" not in page
        page = admin_client.get("/admin/realtime/realtimesession/", {"node": "node-b"}).content.decode()
        assert "sess_other" in page

    def test_the_detail_page_shows_the_transcript_in_order_and_the_latencies(self, admin_client):
        make_session()
        page = admin_client.get("/admin/realtime/realtimesession/sess_audit1/change/").content.decode()
        positions = [
            page.index(text)
            for text in (
                "what is the weather in lisbon",
                "It is sunny in Lisbon.",
                "and tomorrow",
                "Rain, I am afraid.",
            )
        ]
        assert positions == sorted(positions)
        assert "resp_1" in page and "resp_2" in page and "800 ms" in page  # voice-to-voice of the second response

    def test_a_turn_shows_where_its_time_went_span_by_span_in_the_order_it_happened(self, admin_client):
        make_session()
        marks = {"speech_end_at": 1000.0, "speculation": 0.1, "stt_start": 0.12, "stt_end": 0.3, "decision": 0.55}
        marks |= {"emitted": 0.6, "sent": 0.61, "core_wait_s": 0.25}
        ResponseRecord.objects.filter(response_id="resp_1").update(breakdown=marks)
        page = admin_client.get("/admin/realtime/realtimesession/sess_audit1/change/").content.decode()
        spans = ["sent ahead to STT: <b>100 ms (at 100 ms)", "transcribed: <b>180 ms (at 300 ms)"]
        spans += ["turn over (speech_stopped): <b>250 ms (at 550 ms)", "sent to the client: <b>10 ms (at 610 ms)"]
        positions = [page.index(span) for span in spans]
        assert positions == sorted(positions)
        assert "threads waiting for a core: <b>250 ms" in page

    def test_the_audit_role_reads_but_cannot_change_or_delete_history(self, auditor):
        make_session()
        client = Client()
        client.force_login(auditor)
        assert client.get("/admin/realtime/realtimesession/sess_audit1/change/").status_code == 200
        response = client.post("/admin/realtime/realtimesession/sess_audit1/change/", {"turns": 99})
        assert response.status_code == 403
        assert client.post("/admin/realtime/realtimesession/sess_audit1/delete/", {"post": "yes"}).status_code == 403
        assert RealtimeSession.objects.get(id="sess_audit1").turns == 2
        response = client.post(
            "/admin/realtime/realtimesession/",
            {"action": "end_live_sessions", "_selected_action": ["sess_audit1"]},
            follow=True,
        )
        assert b"No action selected" in response.content  # the action is not offered to auditors

    def test_the_selected_sessions_export_as_csv(self, admin_client):
        make_session(
            summary={"words": {"user": 8, "assistant": 7}, "latency_s": {"voice_to_voice": {"p50": 0.6, "p90": 0.76}}}
        )
        make_session("sess_two")
        response = admin_client.post(
            "/admin/realtime/realtimesession/",
            {"action": "export_csv", "_selected_action": ["sess_audit1", "sess_two"]},
        )
        assert response["Content-Type"].startswith("text/csv")
        rows = list(csv.DictReader(io.StringIO(response.content.decode())))
        assert {row["id"] for row in rows} == {"sess_audit1", "sess_two"}
        first = next(row for row in rows if row["id"] == "sess_audit1")
        assert first["principal"] == "key:ops" and first["user_words"] == "8" and first["voice_to_voice_p50_s"] == "0.6"


@pytest.mark.django_db
class TestTasks:
    def test_the_summary_has_latency_percentiles_and_word_counts(self):
        make_session()
        summary = tasks.summarize_session("sess_audit1")
        session = RealtimeSession.objects.get(id="sess_audit1")
        assert session.summary == summary and session.summarized_at is not None
        assert summary["words"] == {"user": 8, "assistant": 9}
        assert summary["latency_s"]["voice_to_voice"] == {"count": 2, "p50": 0.6, "p90": 0.76, "p99": 0.796, "max": 0.8}
        assert summary["output_tokens"] == 12 and summary["responses"] == {"completed": 2}

    def test_retention_deletes_sessions_older_than_the_setting_with_their_records(self, settings):
        settings.S2S_RETENTION_DAYS = 7
        make_session("sess_old", started_at=timezone.now() - timedelta(days=8))
        make_session("sess_new", started_at=timezone.now() - timedelta(days=6))
        assert tasks.purge_old_sessions() == 1
        assert list(RealtimeSession.objects.values_list("id", flat=True)) == ["sess_new"]
        assert not ConversationItem.objects.filter(session_id="sess_old").exists()

    def test_the_embedded_beat_runs_its_tasks_on_its_first_round_in_a_fresh_process(self, tmp_path):
        # A fresh process, as `manage.py serve` is: nothing has imported realtime.tasks yet.
        script = (
            "import django, sys; django.setup()\n"
            "from datetime import timedelta\n"
            "from django.core.management import call_command\n"
            "from django.utils import timezone\n"
            "call_command('migrate', verbosity=0)\n"
            "from realtime.models import RealtimeSession\n"
            "RealtimeSession.objects.create(id='sess_old', node='n', started_at=timezone.now() - timedelta(days=400))\n"
            "assert 'realtime.tasks' not in sys.modules\n"
            "from realtime.node.cluster import Heartbeat\n"
            "Heartbeat(lambda: None, timezone.now(), 1.0)._run_due_tasks()\n"
            "print('sessions left:', RealtimeSession.objects.count())\n"
        )
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "s2s_project.settings",
            "DATABASE_URL": f"sqlite:///{tmp_path / 'beat.sqlite3'}",
            "CELERY_BROKER_URL": "",
        }
        result = subprocess.run(
            [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
        )
        assert result.returncode == 0, result.stderr
        assert "sessions left: 0" in result.stdout and "failed" not in result.stderr, result.stderr

    def test_a_node_whose_heartbeat_stopped_is_marked_gone_and_its_sessions_interrupted(self, settings):
        settings.S2S_NODE_TIMEOUT_S = 10
        now = timezone.now()
        slots = [
            {
                "index": 0,
                "state": "busy",
                "session_id": "sess_live",
                "since": time.time(),
                "sessions_served": 3,
                "rebuilds": 0,
            }
        ]
        Node.objects.create(
            name="dead",
            started_at=now,
            heartbeat_at=now - timedelta(seconds=30),
            warm=True,
            admitting=True,
            slots=slots,
        )
        Node.objects.create(name="alive", started_at=now, heartbeat_at=now, warm=True, admitting=True, slots=slots)
        make_session("sess_live", node="dead", end_reason=EndReason.ACTIVE, ended_at=None)
        make_session("sess_live_b", node="alive", end_reason=EndReason.ACTIVE, ended_at=None)
        assert tasks.reap_dead_nodes() == ["dead"]
        assert tasks.reap_dead_nodes() == []  # once only
        dead = RealtimeSession.objects.get(id="sess_live")
        assert dead.end_reason == EndReason.INTERRUPTED and dead.ended_at == Node.objects.get(name="dead").heartbeat_at
        assert RealtimeSession.objects.get(id="sess_live_b").end_reason == EndReason.ACTIVE
        board = {node["name"]: node for node in cluster.board()}
        assert board["dead"]["status"] == "gone" and board["dead"]["slots"][0]["state"] == "gone"
        # its one unit is busy: full, as its /readyz would say, not "ready"
        assert board["alive"]["status"] == "full" and board["alive"]["slots"][0]["state"] == "busy"


@pytest.mark.django_db
class TestSlotBoard:
    def publish_two_nodes(self) -> None:
        now, wall = timezone.now(), time.time()
        for name, states in (("node-a", ("busy", "idle")), ("node-b", ("quarantined", "warming"))):
            Node.objects.create(
                name=name,
                host="h",
                pid=1,
                profile="loopback",
                started_at=now,
                heartbeat_at=now,
                warm=True,
                admitting=True,
                free_units=states.count("idle"),
                slots=[
                    {
                        "index": i,
                        "state": s,
                        "session_id": f"sess_{name}_{i}" if s == "busy" else None,
                        "since": wall - 12,
                        "sessions_served": 5,
                        "rebuilds": 0,
                    }
                    for i, s in enumerate(states)
                ],
            )

    def test_pool_status_prints_every_nodes_units(self):
        self.publish_two_nodes()
        text = PoolStatus().table(cluster.board())
        lines = text.splitlines()
        assert lines[0].split() == ["node", "status", "unit", "state", "session", "for_s", "served", "rebuilds"]
        assert any(line.split()[:5] == ["node-a", "ready", "0", "busy", "sess_node-a_0"] for line in lines)
        assert any(line.split()[:4] == ["node-b", "full", "0", "quarantined"] for line in lines)  # no unit free
        assert "2 node(s), 2 alive; 1 of 4 units free." in text
        out = io.StringIO()
        call_command("pool_status", stdout=out)
        assert "sess_node-a_0" in out.getvalue()

    def test_the_board_page_and_its_snapshot_show_state_and_age(self, admin_client):
        self.publish_two_nodes()
        page = admin_client.get("/admin/realtime/node/")
        assert page.status_code == 200 and b"Slot board" in page.content and b"board-initial" in page.content
        nodes = admin_client.get("/admin/realtime/node/board.json").json()["nodes"]
        busy = nodes[0]["slots"][0]
        assert busy["state"] == "busy" and busy["session_id"] == "sess_node-a_0" and 11 <= busy["for_s"] < 60

    def test_a_busy_unit_shows_its_sessions_transport_client_and_activity_and_why_it_was_last_rebuilt(
        self, admin_client
    ):
        self.publish_two_nodes()
        node = Node.objects.get(name="node-a")
        node.slots[0] |= {"activity": "answering", "rebuilds": 1, "last_rebuild": "did not drain in 5.0 s"}
        node.save()
        make_session("sess_node-a_0", transport="webrtc", end_reason=EndReason.ACTIVE, ended_at=None)
        busy, idle = admin_client.get("/admin/realtime/node/board.json").json()["nodes"][0]["slots"]
        assert busy["transport"] == "WebRTC" and busy["client"] == "key:ops · 10.0.0.7"
        assert busy["activity"] == "answering" and busy["last_rebuild"] == "did not drain in 5.0 s"
        assert "transport" not in idle and "client" not in idle

    def test_a_units_snapshot_says_what_it_is_doing_and_why_it_was_last_rebuilt(self):
        pool = make_loopback_pool(size=1)
        try:
            unit = pool.units[0]
            assert unit.snapshot()["activity"] == "" and unit.snapshot()["last_rebuild"] is None
            lease = pool.claim(lambda out: None, "sess_1")
            assert lease is not None and unit.snapshot()["activity"] == "listening"
            pool.release(lease).result(timeout=10)
            unit.rebuild()
            assert unit.snapshot()["rebuilds"] == 1 and unit.snapshot()["last_rebuild"].startswith("did not drain")
        finally:
            pool.shutdown()

    def test_ending_a_session_from_the_board_needs_the_permission(self, auditor, admin_client):
        make_session("sess_live", end_reason=EndReason.ACTIVE, ended_at=None)
        client = Client()
        client.force_login(auditor)
        assert client.get("/admin/realtime/node/").status_code == 200
        assert client.post("/admin/realtime/node/end/sess_live/").status_code == 403
        assert admin_client.post("/admin/realtime/node/end/sess_gone/").status_code == 404
        assert admin_client.post("/admin/realtime/node/end/sess_live/").json() == {
            "status": "ending",
            "session_id": "sess_live",
        }


class FakeConversation:
    """What TurnAudio reads of a conversation: the input format and its responses (``responses.find``)."""

    def __init__(self) -> None:
        self.session = SimpleNamespace(input_format=audio.PCM)
        self.states: dict[str, SimpleNamespace] = {}  # running or finished: TurnAudio reads both alike
        self.responses = SimpleNamespace(find=self.states.get)


def wav_seconds(data: bytes) -> float:
    with wave.open(io.BytesIO(data)) as file:
        return file.getnframes() / file.getframerate()


@pytest.mark.django_db(transaction=True)
class TestRecordings:
    def record_a_turn(self, settings, tmp_path) -> list:
        """3 s of appended audio, speech from 0.5 s to 2.0 s per the VAD, and a 1.2 s answer."""
        settings.MEDIA_ROOT = str(tmp_path)
        settings.S2S_RECORD_AUDIO = True
        make_session("sess_rec")
        writes: list = []
        turn = recordings.for_session("sess_rec", writes.append)
        conversation = FakeConversation()
        appended = audio.encode(tone(3.0), audio.PCM)
        for start in range(0, len(appended), 1920):  # 40 ms chunks
            turn.client_event(InputAudioAppend(audio=appended[start : start + 1920]), conversation)
        turn.output(m.SpeechStarted(generation=0, item_id="item_1", audio_start_ms=500), conversation)
        turn.output(m.SpeechStopped(generation=0, item_id="item_1", audio_end_ms=2000), conversation)
        turn.output(m.AudioCommitted(generation=0, item_id="item_1", duration_ms=1500), conversation)
        state = SimpleNamespace(id="resp_a", item_id="item_2", out_of_band=False, output_format=audio.PCM)
        conversation.states["resp_a"] = state
        answer = audio.encode(tone(1.2), audio.PCM)
        for start in range(0, len(answer), 4800):
            turn.output(m.AudioOut(generation=0, response_id="resp_a", data=answer[start : start + 4800]), conversation)
        turn.output(m.ResponseFinished(generation=0, response_id="resp_a", status="completed"), conversation)
        for write in writes:
            write()
        return writes

    def test_each_turn_is_stored_as_wav_cut_where_the_vad_said(self, settings, tmp_path):
        assert len(self.record_a_turn(settings, tmp_path)) == 2
        user = Recording.objects.get(session_id="sess_rec", role="user")
        assistant = Recording.objects.get(session_id="sess_rec", role="assistant")
        assert (user.item_id, assistant.item_id) == ("item_1", "item_2")
        assert user.duration_ms == 1500 and abs(wav_seconds(user.audio.read()) - 1.5) < 0.01
        assert assistant.duration_ms == 1200 and abs(wav_seconds(assistant.audio.read()) - 1.2) < 0.01
        assert (tmp_path / user.audio.name).exists()

    def test_recording_is_off_by_default(self, settings):
        settings.S2S_RECORD_AUDIO = False
        assert recordings.for_session("sess_x", lambda write: None) is None

    def test_retention_deletes_the_files_with_the_session(self, settings, tmp_path):
        self.record_a_turn(settings, tmp_path)
        files = [tmp_path / r.audio.name for r in Recording.objects.all()]
        assert len(files) == 2 and all(f.exists() for f in files)
        settings.S2S_RETENTION_DAYS = 1
        RealtimeSession.objects.filter(id="sess_rec").update(started_at=timezone.now() - timedelta(days=2))
        assert tasks.purge_old_sessions() == 1
        assert not Recording.objects.exists()
        assert not any(f.exists() for f in files)

    def test_the_admin_plays_a_recording_to_readers_only(self, settings, tmp_path, admin_client):
        self.record_a_turn(settings, tmp_path)
        user = Recording.objects.get(session_id="sess_rec", role="user")
        url = f"/admin/realtime/realtimesession/sess_rec/recording/{user.pk}/"
        page = admin_client.get("/admin/realtime/realtimesession/sess_rec/change/").content.decode()
        assert url in page and "<audio" in page
        response = admin_client.get(url)
        assert response["Content-Type"] == "audio/wav" and b"".join(response.streaming_content)[:4] == b"RIFF"
        assert Client().get(url).status_code == 302  # to the login page
        assert admin_client.get("/admin/realtime/realtimesession/sess_other/recording/1/").status_code == 404


@pytest.mark.django_db
class TestTimings:
    def test_a_session_timings_are_given_in_milliseconds(self, client, settings):
        settings.S2S_AUTH_REQUIRED = False
        make_session()
        body = client.get("/v1/realtime/sessions/sess_audit1/timings").json()
        assert [r["response_id"] for r in body["responses"]] == ["resp_1", "resp_2"]
        assert body["responses"][1] == {
            "response_id": "resp_2",
            "item_id": "item_4",
            "status": "completed",
            "stt_ms": 200,
            "lm_first_token_ms": 100,
            "tts_first_audio_ms": 140,
            "voice_to_voice_ms": 800,
        }

    def test_with_authentication_on_only_the_sessions_owner_or_staff_may_read_them(
        self, client, settings, admin_client
    ):
        settings.S2S_AUTH_REQUIRED = True
        owner, owner_key = create_api_key("owner")
        _, other_key = create_api_key("another")
        make_session(owner_key_id=owner.pk)
        url = "/v1/realtime/sessions/sess_audit1/timings"
        assert client.get(url).status_code == 401
        assert admin_client.get(url).status_code == 200
        assert client.get(url, HTTP_AUTHORIZATION=f"Bearer {owner_key}").status_code == 200
        foreign = client.get(url, HTTP_AUTHORIZATION=f"Bearer {other_key}")
        unknown = client.get("/v1/realtime/sessions/sess_nosuch/timings", HTTP_AUTHORIZATION=f"Bearer {other_key}")
        assert foreign.status_code == unknown.status_code == 404
        assert foreign.json()["error"]["message"].replace("sess_audit1", "ID") == unknown.json()["error"][
            "message"
        ].replace("sess_nosuch", "ID")


def test_the_page_offers_each_installed_voice_once():
    engines = EngineConfig(
        extra_voices=(("en_GB-alan", "/voices/en_GB-alan.onnx"),),
        tts_model="/v/en_US-joe-medium.onnx",
        kokoro_voices=("af_heart", "bm_george"),  # make kokoro's voices, offered by name
    )
    assert installed_voices(engines) == [
        ("alloy", "Default voice (Piper, en_US-joe-medium)"),
        ("en_GB-alan", "en GB alan"),
        ("af_heart", "Kokoro heart (US English, female)"),
        ("bm_george", "Kokoro george (British English, male)"),
    ]


def test_metrics_are_in_the_prometheus_text_format(client, loopback_pool):
    from prometheus_client.parser import text_string_to_metric_families

    from realtime.node import runtime

    runtime.current().metrics.observe(Stage.VOICE_TO_VOICE, 0.3)
    response = client.get("/metrics")
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    samples = {}
    for family in text_string_to_metric_families(response.content.decode()):  # as Prometheus reads it
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    assert samples[("s2s_units_free", ())] == 2 and samples[("s2s_units", (("state", "idle"),))] == 2
    assert samples[("s2s_sessions_active", ())] == 0 and samples[("s2s_pool_ready", ())] == 1
    assert samples[("s2s_record_writes_pending", ())] >= 0
    assert {
        ("s2s_record_writes_dropped_total", (("reason", "refused"),)),
        ("s2s_record_writes_dropped_total", (("reason", "backlog_full"),)),
    } <= samples.keys()
    bucket = "s2s_latency_seconds_bucket"
    assert samples[(bucket, (("le", "+Inf"), ("stage", "voice_to_voice")))] >= 1
    assert (
        samples[(bucket, (("le", "0.25"), ("stage", "voice_to_voice")))]
        <= samples[(bucket, (("le", "0.5"), ("stage", "voice_to_voice")))]
    )


@pytest.mark.django_db
def test_every_stage_is_a_record_field_a_metrics_label_and_a_timing_of_the_page(client, loopback_pool):
    """The stages are named once (``Stage``): the record, ``/metrics`` and the page's timings all follow it."""
    make_session("sess_stages")
    ResponseRecord.objects.create(
        session_id="sess_stages",
        response_id="resp_stages",
        status="completed",
        **{stage.field: 0.25 for stage in Stage},
    )
    responses = client.get("/v1/realtime/sessions/sess_stages/timings").json()["responses"]
    timings = next(response for response in responses if response["response_id"] == "resp_stages")
    assert {key: timings[key] for key in timings if key.endswith("_ms")} == {
        f"{stage.value}_ms": 250 for stage in Stage
    }
    exposition = client.get("/metrics").content.decode()
    assert all(f'stage="{stage.value}"' in exposition for stage in Stage)


def test_with_a_metrics_token_only_a_scraper_that_sends_it_gets_the_metrics(client, loopback_pool, settings):
    settings.S2S_METRICS_TOKEN = "scrape-me"
    refused = [
        client.get("/metrics"),
        client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-you"),
        client.get("/metrics", HTTP_AUTHORIZATION="Basic scrape-me"),
    ]
    assert [r.status_code for r in refused] == [401, 401, 401]
    assert refused[0]["WWW-Authenticate"].startswith("Bearer") and b"s2s_" not in refused[0].content
    allowed = client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-me")
    assert allowed.status_code == 200 and b"s2s_units_free" in allowed.content


@pytest.mark.services
def test_the_model_admin_and_record_tests_pass_on_postgresql(postgres_url):
    """Reruns this module and test_records.py with PostgreSQL as the database (its own test database).

    The rerun deselects ``services`` tests, this one among them, so it does not recurse.
    """
    import psycopg

    name = f"s2s_audit_{uuid.uuid4().hex[:12]}"  # pytest-django creates and drops test_<name>: no clash with other runs
    env = {**os.environ, "DATABASE_URL": with_database(postgres_url, name)}
    try:
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "-m",
                "not services and not browser",
                "tests/audit/test_admin.py",
                "tests/audit/test_records.py",
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:  # the record writer's thread may still hold a connection when pytest-django drops the database
        with psycopg.connect(postgres_url.replace("postgres://", "postgresql://", 1), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "test_{name}" WITH (FORCE)')
    tail = result.stdout[-3000:] + result.stderr[-2000:]
    assert result.returncode == 0, tail
    assert " passed" in result.stdout and " skipped" not in result.stdout and " failed" not in result.stdout, tail
