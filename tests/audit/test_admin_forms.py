"""The admin's figures and forms: counts a search cannot multiply, a stored prompt's next version filled in,
a live session's page that can end it, the session list's filter, sorting and CSV, and the API keys' buttons."""

from __future__ import annotations

import csv
import io
import re
from datetime import timedelta

import pytest
from django.contrib.admin.utils import quote
from django.contrib.auth.models import Group, User
from django.utils import timezone

from realtime.apps import AUDITORS_GROUP
from realtime.auth_models import ApiKey
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


# --- issue 50: the session list's filter, sorting and CSV; the keys' Copy and Revoke; the site's header -------


def test_the_who_filter_names_every_choice_and_its_nobody_finds_the_sessions_opened_without_a_credential(
    admin_client,
):
    session_with("sess_key", ["hi"], answers=1, principal="key:ops")
    session_with("sess_open", ["hi"], answers=1, principal="")
    page = admin_client.get(SESSIONS).content.decode()
    assert 'href="?principal="' not in page  # an empty link, which axe-core calls link-name
    assert re.search(r'href="\?principal=%28none%29"[^>]*>nobody \(authentication off\)</a>', page), page
    page = admin_client.get(SESSIONS, {"principal": "(none)"}).content.decode()
    assert "sess_open" in page and "sess_key" not in page
    page = admin_client.get(SESSIONS, {"principal": "key:ops"}).content.decode()
    assert "sess_key" in page and "sess_open" not in page


def listed(page: str) -> list[str]:
    return re.findall(r"/realtimesession/(sess\w+)/change/", page)


def test_the_session_list_sorts_by_duration_and_by_p50(admin_client):
    now = timezone.now()
    for session_id, minutes, p50 in (("sessA", 3, 0.9), ("sessB", 1, 0.5), ("sessC", 2, None)):
        summary = {"latency_s": {"voice_to_voice": {"p50": p50}}} if p50 is not None else None
        RealtimeSession.objects.create(
            id=session_id,
            node="n",
            started_at=now - timedelta(minutes=minutes),
            ended_at=now,
            end_reason=EndReason.CLIENT_CLOSED,
            summary=summary,
        )
    page = admin_client.get(SESSIONS).content.decode()
    assert re.search(r'<th scope="col" class="sortable column-duration', page), "duration cannot be sorted"
    assert re.search(r'<th scope="col" class="sortable column-voice_to_voice_p50', page), "p50 cannot be sorted"
    assert listed(admin_client.get(SESSIONS, {"o": "2"}).content.decode()) == ["sessB", "sessC", "sessA"]
    by_p50 = listed(admin_client.get(SESSIONS, {"o": "-4"}).content.decode())
    assert by_p50.index("sessA") < by_p50.index("sessB")


def test_the_csv_says_how_each_session_was_carried(admin_client):
    session_with("sess_rtc", ["hi"], answers=1, transport="webrtc")
    response = admin_client.post(SESSIONS, {"action": "export_csv", "_selected_action": ["sess_rtc"]})
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert rows[0]["transport"] == "webrtc"


def test_the_admin_wears_the_servers_own_header(admin_client):
    page = admin_client.get("/admin/").content.decode()
    assert "Django administration" not in page and "Speech-to-speech server" in page


KEYS = "/admin/realtime/apikey/"


def test_a_new_key_is_shown_once_with_a_copy_button(admin_client):
    response = admin_client.post(f"{KEYS}add/", {"name": "ci"}, follow=True)
    page = response.content.decode()
    key = re.search(r'<code id="new-api-key">(sk-[^<]+)</code>', page)
    assert key and 'class="button copy-key" data-copy="new-api-key"' in page
    assert "realtime/keys.js" in page  # what makes the button copy
    assert ApiKey.objects.get(name="ci").prefix == key.group(1)[:12]


def test_revoke_is_a_button_that_saves_revoked_at_so_the_keys_sessions_end(admin_client, monkeypatch):
    ended: list[int] = []
    monkeypatch.setattr("realtime.node.cluster.end_key_sessions", ended.append)
    key = ApiKey.objects.create(name="ops", prefix="sk-s2s-abcd", key_hash="x" * 64)
    url = f"{KEYS}{key.pk}/change/"
    page = admin_client.get(url).content.decode()
    assert 'name="_revoke"' in page and 'name="revoked_at' not in page  # a button, not a date to type
    assert admin_client.post(url, {"name": "ops", "revoked_at_0": "2000-01-01", "revoked_at_1": "00:00"}).status_code
    assert ApiKey.objects.get(pk=key.pk).revoked_at is None and ended == []  # no date typed in
    response = admin_client.post(url, {"name": "ops", "_revoke": "Revoke this key"})
    assert response.status_code == 302
    assert ApiKey.objects.get(pk=key.pk).revoked_at is not None
    assert ended == [key.pk]  # realtime/node/revocation.py's post_save
    assert 'name="_revoke"' not in admin_client.get(url).content.decode()

    other = ApiKey.objects.create(name="ci", prefix="sk-s2s-efgh", key_hash="y" * 64)
    admin_client.post(KEYS, {"action": "revoke", "_selected_action": [other.pk, key.pk]})
    assert ApiKey.objects.get(pk=other.pk).revoked_at is not None
    assert ended == [key.pk, other.pk]  # the list's action saves too; a key revoked already is left alone
