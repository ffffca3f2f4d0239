"""The admin's way into supervising a live session (issue 51), in-process: the controls and their socket on a live
session's page, the "Supervise" links of the list and the slot board, only for those who may; the supervision
records on the session's page. The controls at work, with real parts: ``tests/browser/test_supervise.py``."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.admin.utils import quote
from django.contrib.auth.models import Group, User
from django.utils import timezone

from realtime import views
from realtime.admin import supervise
from realtime.apps import AUDITORS_GROUP
from realtime.models import EndReason, RealtimeSession, SupervisorAction, SupervisorActionKind

pytestmark = pytest.mark.django_db
SESSIONS = "/admin/realtime/realtimesession/"
CONTROLS = ('id="supervise-listen"', 'id="supervise-whisper"', 'id="supervise-take-over"', 'id="supervise-hand-back"')


def session(session_id: str, live: bool) -> RealtimeSession:
    started = timezone.now() - timedelta(minutes=1)
    return RealtimeSession.objects.create(
        id=session_id,
        node="node-a",
        started_at=started,
        ended_at=None if live else started + timedelta(seconds=30),
        end_reason=EndReason.ACTIVE if live else EndReason.CLIENT_CLOSED,
    )


def test_a_supervisor_gets_the_controls_on_a_live_sessions_page_and_the_links_to_it(admin_client):
    session("sess_live", live=True)
    session("sess_done", live=False)
    page = admin_client.get(f"{SESSIONS}{quote('sess_live')}/change/").content.decode()
    for control in CONTROLS:
        assert control in page, control
    assert 'data-socket-path="/v1/realtime?call_id=sess_live&amp;mode=supervise"' in page
    assert 'role="status"' in page and "/static/realtime/supervise.js" in page
    assert "No one supervised this session." in page

    done = admin_client.get(f"{SESSIONS}{quote('sess_done')}/change/").content.decode()
    assert not any(control in done for control in CONTROLS)  # nothing to supervise once it ended
    assert "No one supervised this session." in done

    listed = admin_client.get(SESSIONS).content.decode()
    assert f'href="{SESSIONS}{quote("sess_live")}/change/#supervise">Supervise</a>' in listed
    assert listed.count(">Supervise</a>") == 1  # the ended session has none
    board = admin_client.get("/admin/realtime/node/").content.decode()
    assert 'data-can-supervise="true"' in board


def test_staff_without_the_permission_see_the_page_as_before(client):
    session("sess_live", live=True)
    auditor = User.objects.create_user("auditor", password="pw", is_staff=True)
    auditor.groups.add(Group.objects.get(name=AUDITORS_GROUP))
    client.force_login(auditor)
    page = client.get(f"{SESSIONS}{quote('sess_live')}/change/").content.decode()
    assert 'id="live"' in page  # followed live, as before
    assert 'id="supervise"' not in page and "supervise.js" not in page and "mode=supervise" not in page
    assert not any(control in page for control in CONTROLS)
    assert ">Supervise</a>" not in client.get(SESSIONS).content.decode()
    assert 'data-can-supervise="false"' in client.get("/admin/realtime/node/").content.decode()


def test_the_sessions_page_lists_who_supervised_it_what_they_did_when_and_for_how_long(admin_client):
    done = session("sess_done", live=False)
    start = done.started_at
    for kind, offset, length, text in (
        (SupervisorActionKind.LISTEN, 1, 20.0, ""),
        (SupervisorActionKind.WHISPER, 2, 0.0, "Offer a callback."),
        (SupervisorActionKind.TAKE_OVER, 3, 7.5, ""),
        (SupervisorActionKind.HAND_BACK, 10.5, 0.0, ""),
    ):
        at = start + timedelta(seconds=offset)
        SupervisorAction.objects.create(
            session=done, kind=kind, actor="sam", text=text, started_at=at, ended_at=at + timedelta(seconds=length)
        )
    page = admin_client.get(f"{SESSIONS}{quote('sess_done')}/change/").content.decode()
    section = page[page.index('id="supervision"') :]
    rows = section.split("<tr>")[2:]  # after the header row
    assert len(rows) == 4, section
    assert "sam" in rows[0] and "listened" in rows[0] and "20.0 s" in rows[0]
    assert "whispered" in rows[1] and "Offer a callback." in rows[1] and "–" in rows[1]
    assert "took over" in rows[2] and "7.5 s" in rows[2]
    assert "handed back" in rows[3]
    assert "No one supervised this session." not in page


def test_the_page_opens_the_socket_the_views_name():
    assert supervise.REALTIME_PATH == views.REALTIME_PATH
