"""The operators' view: the session audit (read-only), the live slot board of every node, ending a live session,
and the way to supervise one (its page's controls: ``static/realtime/supervise.js``)."""

from __future__ import annotations

import csv
from functools import partial
from typing import Any, ClassVar, cast

from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.utils import quote, unquote
from django.db.models import BooleanField, DurationField, ExpressionWrapper, F, FloatField, QuerySet, Value
from django.db.models.fields.json import KT
from django.db.models.functions import Cast
from django.http import (
    FileResponse,
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseForbidden,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
    JsonResponse,
)
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone

from realtime.admin import supervise
from realtime.admin.calling import call_view, phone_call
from realtime.admin.detail import session_detail
from realtime.admin.translation import VOICE_AGENT, KindFilter, kind_of
from realtime.models import (
    TYPED_LATENCY,
    ConversationItem,
    EndReason,
    Node,
    RealtimeSession,
    Recording,
    RefusalCount,
    ResponseRecord,
    SessionQuerySet,
    Stage,
)
from realtime.node import cluster

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_safe(value: Any) -> Any:
    """A text cell a spreadsheet would run as a formula (``=HYPERLINK(...)``) gets a leading ``'`` (OWASP)."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


CSV_FIELDS = (
    "id",
    "node",
    "unit_index",
    "principal",
    "client_addr",
    "user_agent",
    "model",
    "transport",
    "started_at",
    "ended_at",
    "end_reason",
    "close_code",
    "turns",
    "errors",
    "unit_rebuild",
    "audio_in_seconds",
    "audio_out_seconds",
    "direction",
    "caller",
    "callee",
    "call_status",
    "call_end_reason",
    "sip_code",
)


admin.site.site_header = "Speech-to-speech server"
admin.site.site_title = "Speech-to-speech server"
admin.site.index_title = "Sessions, slots and keys"
NOBODY = "(none)"  # the "who" filter's value for sessions opened without a credential (authentication off)


class PrincipalFilter(admin.SimpleListFilter):
    """By who, every choice named: sessions opened without a credential are "nobody" rather than a blank link."""

    title = "who"
    parameter_name = "principal"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        names = RealtimeSession.objects.order_by("principal").values_list("principal", flat=True).distinct()
        return [(name or NOBODY, name or "nobody (authentication off)") for name in names]

    def queryset(self, request: HttpRequest, queryset: QuerySet[RealtimeSession]) -> QuerySet[RealtimeSession]:
        value = self.value()
        if value is None:
            return queryset
        return queryset.filter(principal="" if value == NOBODY else value)


class ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False
    show_change_link = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ConversationItemInline(ReadOnlyInline):
    model = ConversationItem
    verbose_name_plural = "Transcript"
    fields = ("seq", "created_at", "role", "text", "audio_ms", "item_id")
    readonly_fields = fields
    ordering = ("seq",)


class ResponseRecordInline(ReadOnlyInline):
    model = ResponseRecord
    verbose_name_plural = "Responses and latencies (seconds)"
    fields: ClassVar[tuple[str, ...]] = (
        "finished_at",
        "response_id",
        "status",
        "reason",
        "input_tokens",
        "output_tokens",
        "audio_ms",
        *(stage.field for stage in Stage),
    )
    readonly_fields = fields
    ordering = ("finished_at",)


class ReadOnlyAdmin(admin.ModelAdmin):
    """History and live state are shown, never edited: no add, change or delete, for anyone."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(RealtimeSession)
class RealtimeSessionAdmin(ReadOnlyAdmin):
    """The audit: history is never edited here (retention deletes it); live sessions can be ended."""

    list_display = (
        "started",
        "duration",
        "user_messages",
        "voice_to_voice_p50",
        "end_reason",
        "transport",
        "phone_call",
        "principal",
    )
    list_display_links = ("started",)
    list_filter = ("started_at", "end_reason", "transport", KindFilter, "direction", "node", PrincipalFilter)
    search_fields = ("id", "principal", "client_addr", "caller", "callee", "items__text")
    date_hierarchy = "started_at"
    readonly_fields = [f.name for f in RealtimeSession._meta.fields]
    inlines = [ConversationItemInline, ResponseRecordInline]
    actions = ["export_csv", "end_live_sessions"]
    list_per_page = 50

    def has_end_live_session_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("realtime.end_live_session")

    @admin.display(description="transport", ordering="transport")
    def transport(self, obj: RealtimeSession) -> str:
        """The transport, and the kind of session where it is not a voice agent's ("WebSocket · translation", as the
        slot board says it): one column, so that the list fits a laptop's screen beside its filters."""
        kind = kind_of(obj)
        return obj.get_transport_display() + ("" if kind == VOICE_AGENT else f" · {kind}")

    @admin.display(description="started", ordering="started_at")
    def started(self, obj: RealtimeSession) -> str:
        return timezone.localtime(obj.started_at).strftime("%Y-%m-%d %H:%M:%S")

    @admin.display(description="duration", ordering="length")
    def duration(self, obj: RealtimeSession) -> str:
        """A live session's "live", with a link to its page's controls for a supervisor (``supervisable``)."""
        if obj.duration_s is not None:
            return f"{obj.duration_s:.1f} s"
        return supervise.live_link(obj) if getattr(obj, "supervisable", False) else "live"

    def get_queryset(self, request: HttpRequest) -> QuerySet[RealtimeSession]:
        # The default manager's queryset is a SessionQuerySet; the admin's annotation says only QuerySet.
        sessions = cast(SessionQuerySet, super().get_queryset(request)).with_user_messages()
        return sessions.annotate(  # the columns sorted by the database: a live session (no end) sorts last
            length=ExpressionWrapper(F("ended_at") - F("started_at"), output_field=DurationField()),
            p50=Cast(KT("summary__latency_s__voice_to_voice__p50"), FloatField()),
            supervisable=Value(supervise.may_supervise(request), BooleanField()),  # the list's link, per request
        )

    @admin.display(description="call", ordering="direction")
    def phone_call(self, obj: RealtimeSession) -> str:
        """A phone call's direction and the other side's number as the audit keeps it (``S2S_SIP_NUMBERS``); an
        outbound call's status and final SIP answer too."""
        return phone_call(obj)

    @admin.display(description="user messages", ordering="n_user_messages")
    def user_messages(self, obj: RealtimeSession) -> str:
        """Typed and spoken alike (``turns`` counts the spoken ones only)."""
        return str(obj.n_user_messages)

    @admin.display(description="speech end to audio, p50", ordering="p50")
    def voice_to_voice_p50(self, obj: RealtimeSession) -> str:
        latency = (obj.summary or {}).get("latency_s", {})
        p50 = (latency.get("voice_to_voice") or {}).get("p50")
        if p50 is not None:
            return f"{p50 * 1000:.0f} ms"
        typed = (latency.get(TYPED_LATENCY) or {}).get("p50")  # no end of speech: from the request instead
        if typed is not None:
            return f"{typed * 1000:.0f} ms (typed, from the request)"
        return "– (typed only)" if obj.turns == 0 and obj.n_user_messages else "–"

    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view
        return [
            path("<str:session_id>/recording/<int:pk>/", wrap(self.recording_view), name="realtime_recording"),
            path("<str:session_id>/end/", wrap(self.end_view), name="realtime_session_end"),
            path("call/", wrap(partial(call_view, self)), name="realtime_place_call"),
            *super().get_urls(),
        ]

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """The session read as a report: facts, summary, chart, and the transcript with each turn's timings."""
        if request.method != "GET":
            return super().change_view(request, object_id, form_url, extra_context)  # refused: read-only
        session = RealtimeSession.objects.filter(id=unquote(object_id)).first()
        if session is None or not self.has_view_permission(request, session):
            return super().change_view(request, object_id, form_url, extra_context)  # 404 / 403 as usual
        live = session.end_reason == EndReason.ACTIVE
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": f"Session {session.id}",
            "original": session,
            "has_view_permission": True,
            "live": live,
            "can_end": live and self.has_end_live_session_permission(request),
            **supervise.page_context(request, session, live),
            "refresh_ms": max(2000, int(settings.S2S_SLOT_BOARD_REFRESH_S * 1000)),
            **session_detail(session),
        }
        return TemplateResponse(request, "admin/realtime/realtimesession/detail.html", context)

    def end_view(self, request: HttpRequest, session_id: str) -> HttpResponse:
        """POST, from a live session's page: ends it wherever it runs, then back to its page, which says so."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_end_live_session_permission(request):  # a 403, not PermissionDenied: no traceback logged
            return HttpResponseForbidden("You may not end live sessions.", content_type="text/plain")
        session_id = unquote(session_id)  # as the page names it (admin_urlquote)
        live = RealtimeSession.objects.filter(id=session_id, end_reason=EndReason.ACTIVE).exists()
        if live:
            cluster.end_session(session_id, reason=f"admin {request.user.get_username()}")
            self.message_user(request, f"Asked session {session_id} to end.", messages.SUCCESS)
        else:
            self.message_user(request, f"Session {session_id} is not live: nothing to end.", messages.WARNING)
        return HttpResponseRedirect(reverse("admin:realtime_realtimesession_change", args=[quote(session_id)]))

    def recording_view(self, request: HttpRequest, session_id: str, pk: int) -> FileResponse:
        """Streams one turn's recording to someone who may read the session (never through a public URL)."""
        recording = Recording.objects.filter(session_id=session_id, pk=pk).first()
        if recording is None or not self.has_view_permission(request, recording.session):
            raise Http404("No such recording.")
        return FileResponse(recording.audio.open("rb"), content_type="audio/wav")

    @admin.action(description="Export the selected sessions as CSV", permissions=["view"])
    def export_csv(self, request: HttpRequest, queryset: QuerySet[RealtimeSession]) -> HttpResponse:
        response = HttpResponse(content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = 'attachment; filename="sessions.csv"'
        out = csv.writer(response)
        out.writerow([*CSV_FIELDS, "user_words", "assistant_words", "voice_to_voice_p50_s", "voice_to_voice_p90_s"])
        for session in queryset.order_by("started_at"):
            summary = session.summary or {}
            v2v = summary.get("latency_s", {}).get("voice_to_voice") or {}
            words = summary.get("words", {})
            out.writerow(
                [
                    csv_safe(value)
                    for value in (
                        *(getattr(session, name) for name in CSV_FIELDS),
                        words.get("user", ""),
                        words.get("assistant", ""),
                        v2v.get("p50", ""),
                        v2v.get("p90", ""),
                    )
                ]
            )
        return response

    @admin.action(description="End the selected live sessions", permissions=["end_live_session"])
    def end_live_sessions(self, request: HttpRequest, queryset: QuerySet[RealtimeSession]) -> None:
        live = list(queryset.filter(end_reason=EndReason.ACTIVE).values_list("id", flat=True))
        for session_id in live:
            cluster.end_session(session_id, reason=f"admin {request.user.get_username()}")
        skipped = queryset.count() - len(live)
        self.message_user(
            request,
            f"Asked {len(live)} live session(s) to end." + (f" {skipped} had already ended." if skipped else ""),
            messages.SUCCESS,
        )


@admin.register(RefusalCount)
class RefusalCountAdmin(ReadOnlyAdmin):
    """Connections that never became a session, per minute and reason."""

    list_display = ("minute", "node", "reason", "close_code", "count")
    list_filter = ("reason", "node")
    date_hierarchy = "minute"


def slot_board() -> list[dict[str, Any]]:
    """Every node's slots (``cluster.board()``), each busy one with its session's transport and client as the
    audit recorded them (the pool's snapshot knows neither)."""
    nodes = cluster.board()
    ids = {slot["session_id"] for node in nodes for slot in node["slots"] if slot.get("session_id")}
    sessions = {session.id: session for session in RealtimeSession.objects.filter(id__in=ids)}
    for node in nodes:
        for slot in node["slots"]:
            session = sessions.get(slot.get("session_id") or "")
            if session is None or slot["state"] in ("idle", "gone"):
                continue
            slot["transport"] = session.get_transport_display()
            if kind_of(session) != "realtime":  # a translation says so beside its transport
                slot["transport"] += f" · {kind_of(session)}"
            slot["client"] = " · ".join(part for part in (session.principal, session.client_addr) if part) or "–"
    return nodes


@admin.register(Node)
class NodeAdmin(ReadOnlyAdmin):
    """The slot board: every node's units, refreshed by short polling of the published snapshots."""

    list_display = ("name", "heartbeat_at", "gone", "free_units", "rejections")

    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view
        return [
            path("board.json", wrap(self.board_json), name="realtime_node_board"),
            path("end/<str:session_id>/", wrap(self.end_session_view), name="realtime_node_end_session"),
            *super().get_urls(),
        ]

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        if not self.has_view_permission(request):
            return super().changelist_view(request, extra_context)  # raises PermissionDenied
        context = {
            **self.admin_site.each_context(request),
            "title": "Slot board",
            "opts": self.model._meta,
            "nodes": slot_board(),
            "board_url": reverse("admin:realtime_node_board"),
            "end_url": reverse("admin:realtime_node_end_session", args=["SESSION_ID"]),
            "sessions_url": reverse("admin:realtime_realtimesession_changelist"),
            "refresh_ms": int(settings.S2S_SLOT_BOARD_REFRESH_S * 1000),
            "can_end": request.user.has_perm("realtime.end_live_session"),
            "can_supervise": supervise.may_supervise(request),
        }
        return TemplateResponse(request, "admin/realtime/node/slot_board.html", context)

    def board_json(self, request: HttpRequest) -> JsonResponse:
        if not self.has_view_permission(request):
            return JsonResponse({"error": "permission denied"}, status=403)
        return JsonResponse({"nodes": slot_board()})

    def end_session_view(self, request: HttpRequest, session_id: str) -> HttpResponse:
        """POST: ends a live session wherever it runs (the channel layer carries the message)."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not request.user.has_perm("realtime.end_live_session"):
            return JsonResponse({"error": "permission denied"}, status=403)
        if not RealtimeSession.objects.filter(id=session_id, end_reason=EndReason.ACTIVE).exists():
            return JsonResponse({"error": f"no live session {session_id}"}, status=404)
        cluster.end_session(session_id, reason=f"admin {request.user.get_username()}")
        return JsonResponse({"status": "ending", "session_id": session_id})


from realtime.admin import keys, prompts  # noqa: E402,F401  (register the API key, client secret and prompt admins)
