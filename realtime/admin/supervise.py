"""Supervising a live session from the admin (issue 51): who may, the socket its page opens, the "Supervise" link of
the session list, and the session's supervision records as its page lists them. The controls themselves are
``static/realtime/supervise.js``; the socket's server side is ``/v1/realtime?call_id=...&mode=supervise``."""

from __future__ import annotations

from typing import Any

from django.contrib.admin.utils import quote
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.http import urlencode
from django.utils.safestring import SafeString

from realtime.access.owner import SUPERVISE_PERMISSION
from realtime.models import RealtimeSession, SupervisorAction, SupervisorActionKind

# The Realtime WebSocket's path, as realtime.views.REALTIME_PATH names it (tests/audit/test_admin_supervise.py keeps
# the two alike): the admin does not import the views, which load the engines' modules (make lint loads the admin).
REALTIME_PATH = "/v1/realtime"
MOMENTS = (SupervisorActionKind.WHISPER, SupervisorActionKind.HAND_BACK)


def may_supervise(request: HttpRequest) -> bool:
    return request.user.has_perm(SUPERVISE_PERMISSION)


def socket_path(session: RealtimeSession) -> str:
    """The supervise WebSocket of ``session``, same origin, signed in by the admin's session cookie."""
    return f"{REALTIME_PATH}?{urlencode({'call_id': session.id, 'mode': 'supervise'})}"


def page_context(request: HttpRequest, session: RealtimeSession, live: bool) -> dict[str, Any]:
    """What the session's page needs to show the controls: only while live, only to a supervisor."""
    return {"can_supervise": live and may_supervise(request), "supervise_path": socket_path(session)}


def live_link(session: RealtimeSession) -> SafeString:
    """A live session's "live" in the list, with the way to its page's controls."""
    page = reverse("admin:realtime_realtimesession_change", args=[quote(session.id)])
    return format_html('live · <a href="{}#supervise">Supervise</a>', page)


def supervision(session: RealtimeSession) -> list[dict[str, str]]:
    """Every listen, whisper, take-over and hand-back: who, what, when, how long (a whisper's note with it)."""
    return [
        {
            "who": action.actor,
            "what": action.get_kind_display(),
            "when": timezone.localtime(action.started_at).strftime("%H:%M:%S"),
            "how_long": how_long(action),
            "text": action.text,
        }
        for action in session.supervisor_actions.order_by("started_at", "id")
    ]


def how_long(action: SupervisorAction) -> str:
    """A listen or a take-over lasts (and may still be going on); a whisper and a hand-back are a moment."""
    if action.kind in MOMENTS:
        return "–"
    return "still going on" if action.duration_s is None else f"{action.duration_s:.1f} s"
