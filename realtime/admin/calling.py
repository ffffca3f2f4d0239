"""Phone calls in the admin: the session list's "call" column (direction, the other side's number as the audit
keeps it, an outbound call's status), and "Call a number" (:func:`call_view`) for staff with
``realtime.place_outbound_call``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from asgiref.sync import async_to_sync
from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import quote
from django.http import HttpRequest, HttpResponse, HttpResponseForbidden, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse

from realtime.access import auth
from realtime.access.owner import Owner
from realtime.models import CallDirection, RealtimeSession
from realtime.transports.sip import dialling
from realtime.transports.sip.dialling import BadTarget

if TYPE_CHECKING:
    from realtime.transports.sip.outbound import CallRecord

MAX_INSTRUCTIONS = 4000


def phone_call(session: RealtimeSession) -> str:
    """``outbound to ********4567: busy (486)``, ``inbound from ****1234``; "–" for a session that is no call."""
    if session.direction == CallDirection.OUTBOUND:
        text = f"outbound to {session.callee or '(number not kept)'}"
        if session.call_status:
            text += f": {session.call_status}"
            if session.sip_code is not None:
                text += f" ({session.sip_code})"
        return text
    if session.direction == CallDirection.INBOUND:
        return f"inbound from {session.caller or '(number not kept)'}"
    return "–"


PERMISSION = "realtime.place_outbound_call"
TEMPLATE = "admin/realtime/realtimesession/place_call.html"


class CallForm(forms.Form):
    """What the admin's "Call a number" asks: the request ``POST /v1/realtime/calls`` takes, in three fields."""

    to = forms.CharField(
        label="Call",
        max_length=dialling.MAX_URI,
        help_text="A sip:user@host[:port] URI (sip:+15551234567@trunk.example) that S2S_SIP_OUTBOUND_ALLOW allows.",
    )
    instructions = forms.CharField(
        label="Instructions",
        required=False,
        max_length=MAX_INSTRUCTIONS,
        widget=forms.Textarea(attrs={"rows": 4, "cols": 80}),
        help_text="What the agent is to do on this call; it speaks first once the callee answers.",
    )
    from_uri = forms.CharField(label="From", required=False, max_length=dialling.MAX_URI, help_text="Optional.")

    def body(self) -> dict[str, Any]:
        data = self.cleaned_data
        sip = {"to": data["to"], **({"from": data["from_uri"]} if data["from_uri"] else {})}
        session: dict[str, Any] = {"type": "realtime"}
        if data["instructions"]:
            session["instructions"] = data["instructions"]
        return {"sip": sip, "session": session}


def call_view(model_admin: admin.ModelAdmin[Any], request: HttpRequest) -> HttpResponse:
    """ "Call a number": staff with ``realtime.place_outbound_call`` place a call as the API would, by the same code
    (``outbound_views.place``: the allow-list, the injection checks, the caps, the claim) in this process; the call
    is theirs (staff alone may follow it), and its live session's page is where they land."""
    if not request.user.has_perm(PERMISSION):  # a 403, not PermissionDenied: no traceback logged
        return HttpResponseForbidden("You may not place outbound calls.", content_type="text/plain")
    form = CallForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        record = place(request, form)
        if record is not None:
            messages.success(request, f"Calling {record.to} (call {record.id}): this is its live session.")
            return HttpResponseRedirect(
                reverse("admin:realtime_realtimesession_change", args=[quote(record.session_id)])
            )
    context = {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.model._meta,
        "title": "Call a number",
        "form": form,
    }
    return TemplateResponse(request, TEMPLATE, context)


def place(request: HttpRequest, form: CallForm) -> CallRecord | None:
    """The call placed (its record), or None with the reason on the form."""
    # Here, not at the top: the admin is loaded where the SIP stack's libraries are not (make lint's mypy).
    from realtime.live.transport import Refusal
    from realtime.transports.calls import BadOffer
    from realtime.transports.sip import outbound_views

    principal = auth.Principal("staff", request.user.get_username())
    user_agent = f"admin ({request.headers.get('User-Agent', '')})"[:500]
    try:
        return async_to_sync(outbound_views.place)(form.body(), principal, Owner(), user_agent, speak_first=True)
    except BadTarget as exc:
        form.add_error("to" if exc.param.startswith("sip.to") else None, f"{exc.message} ({exc.code})")
    except BadOffer as exc:
        form.add_error("instructions", f"{exc.message} ({exc.code})")
    except Refusal as refusal:
        form.add_error(None, f"{refusal.message} ({refusal.code})")
    return None
