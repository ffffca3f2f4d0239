"""The admin's figures and forms: counts a search cannot multiply, a stored prompt's next version filled in,
and a live session's page that can end it."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.contrib.admin.utils import quote
from django.contrib.auth.models import Group, User
from django.utils import timezone

from realtime.apps import AUDITORS_GROUP
from realtime.models import ConversationItem, EndReason, RealtimeSession
from realtime.prompt_models import Prompt, PromptVersion

pytestmark = pytest.mark.django_db
SESSIONS = "/admin/realtime/realtimesession/"


def session_with(session_id: str, said: list[str], answers: int, **fields) -> RealtimeSession:
    """A finished session whose user said ``said`` and which got ``answers`` assistant items, each about the sky."""
    session = RealtimeSession.objects.create(
        id=session_id,
        node="node-a",
        started_at=timezone.now() - timedelta(minutes=1),
        ended_at=timezone.now(),
        end_reason=EndReason.CLIENT_CLOSED,
        **fields,
    )
    lines = [("user", text) for text in said] + [("assistant", "The sky is blue.")] * answers
    for seq, (role, text) in enumerate(lines, 1):
        ConversationItem.objects.create(session=session, seq=seq, item_id=f"item_{seq}", role=role, text=text)
    return session


def user_messages(page: str, session_id: str) -> str:
    link = f"/{quote(session_id)}/change/"
    rows = [row for row in re.findall(r"<tr[^>]*>.*?</tr>", page, re.S) if link in row]
    assert len(rows) == 1, f"{session_id} is listed {len(rows)} times"
    cell = re.search(r'<td class="field-user_messages">(\d+)</td>', rows[0])
    assert cell, rows[0]
    return cell.group(1)


def test_a_search_in_the_transcripts_leaves_the_user_message_counts_as_they_are(admin_client):
    # Every item mentions the sky: a search joined to the items would count each user item once per match.
    session_with("sess_six", [f"sky question {n}" for n in range(6)], answers=6)
    session_with("sess_one", ["is the sky blue"], answers=1)
    session_with("sess_none", [], answers=2)
    plain = admin_client.get(SESSIONS).content.decode()
    searched = admin_client.get(SESSIONS, {"q": "sky"}).content.decode()
    for session_id, count in (("sess_six", "6"), ("sess_one", "1"), ("sess_none", "0")):
        assert user_messages(plain, session_id) == count
        assert user_messages(searched, session_id) == count, f"{session_id} counted wrong under ?q=sky"
    ordered = admin_client.get(SESSIONS, {"q": "sky", "o": "-3"}).content.decode()  # sorted by the count
    assert ordered.index("sess_six") < ordered.index("sess_one") < ordered.index("sess_none")


def test_a_stored_prompt_offers_its_next_version_number(admin_client):
    add = admin_client.get("/admin/realtime/prompt/add/").content.decode()
    assert re.search(r'name="versions-0-version" value="1"', add), "a new prompt's first version is not 1"

    prompt = Prompt.objects.create(name="guide")
    for version in (1, 2):
        PromptVersion.objects.create(prompt=prompt, version=version, instructions=f"Guide v{version}.")
    url = f"/admin/realtime/prompt/{quote(prompt.id)}/change/"
    page = admin_client.get(url).content.decode()
    assert re.search(r'name="versions-2-version" value="3"', page)

    form = {
        "id": prompt.id,
        "name": "guide",
        "versions-TOTAL_FORMS": "3",
        "versions-INITIAL_FORMS": "2",
        "versions-MIN_NUM_FORMS": "0",
        "versions-MAX_NUM_FORMS": "1000",
    }
    for index, version in enumerate(PromptVersion.objects.filter(prompt=prompt).order_by("version")):
        form |= {
            f"versions-{index}-id": str(version.pk),
            f"versions-{index}-prompt": prompt.id,
            f"versions-{index}-version": str(version.version),
            f"versions-{index}-instructions": version.instructions,
            f"versions-{index}-variables": "{}",
        }
    # what a browser posts of the blank version as rendered (with the hidden initial of its callable default)
    assert 'name="initial-versions-2-variables"' in page
    blank = {
        "versions-2-prompt": prompt.id,
        "versions-2-version": "3",
        "versions-2-variables": "{}",
        "initial-versions-2-variables": "{}",
    }
    response = admin_client.post(url, form | blank | {"versions-2-instructions": ""})
    assert response.status_code == 302, "the untouched blank version was refused"  # unchanged: skipped
    assert PromptVersion.objects.filter(prompt=prompt).count() == 2
    response = admin_client.post(url, form | blank | {"versions-2-instructions": "Guide v3."})
    assert response.status_code == 302
    assert PromptVersion.objects.get(prompt=prompt, version=3).instructions == "Guide v3."


def test_a_live_session_page_ends_it_for_those_who_may_and_refreshes_while_live(admin_client, monkeypatch, caplog):
    ended: list[tuple[str, str]] = []
    monkeypatch.setattr("realtime.node.cluster.end_session", lambda sid, reason: ended.append((sid, reason)))
    live = session_with("sess_live", ["hello"], answers=1)
    RealtimeSession.objects.filter(pk=live.pk).update(end_reason=EndReason.ACTIVE, ended_at=None)
    url = f"{SESSIONS}{quote('sess_live')}/change/"  # the admin's quoting: sess_5Flive
    page = admin_client.get(url).content.decode()
    assert 'id="end-session"' in page and "data-refresh-ms" in page
    assert f'action="{SESSIONS}{quote("sess_live")}/end/"' in page
    response = admin_client.post(f"{SESSIONS}{quote('sess_live')}/end/")
    assert response.status_code == 302 and response["Location"] == url
    assert ended == [("sess_live", "admin admin")]

    done = session_with("sess_done", ["hello"], answers=1)
    page = admin_client.get(f"{SESSIONS}{quote(done.id)}/change/").content.decode()
    assert 'id="end-session"' not in page and "data-refresh-ms" not in page  # nothing to end or wait for
    assert admin_client.post(f"{SESSIONS}{quote('sess_done')}/end/").status_code == 302
    assert ended == [("sess_live", "admin admin")]

    auditor = User.objects.create_user("auditor", password="pw", is_staff=True)
    auditor.groups.add(Group.objects.get(name=AUDITORS_GROUP))
    admin_client.force_login(auditor)
    page = admin_client.get(url).content.decode()
    assert 'id="end-session"' not in page and "data-refresh-ms" in page  # reads it live, cannot end it
    caplog.clear()
    assert admin_client.post(f"{SESSIONS}{quote('sess_live')}/end/").status_code == 403
    assert not [record for record in caplog.records if record.exc_info]  # a 403, not a PermissionDenied traceback
    assert admin_client.get(f"{SESSIONS}{quote('sess_live')}/end/").status_code == 405
    assert len(ended) == 1
