from __future__ import annotations

from django.contrib import admin
from django.urls import path

from realtime import views
from realtime.access import views as auth_views
from realtime.transports import call_routes, calls as call_views
from realtime.transports.sip import views as sip_views
from realtime.transports.webrtc import views as webrtc_views

urlpatterns = [
    path("", views.index, name="index"),
    path("healthz", views.healthz, name="healthz"),
    path("readyz", views.readyz, name="readyz"),
    path("metrics", views.metrics, name="metrics"),
    path("v1/realtime/client_secrets", auth_views.client_secrets, name="client_secrets"),
    path(
        "v1/realtime/translations/client_secrets",
        auth_views.translation_client_secrets,
        name="translation_client_secrets",
    ),
    path("v1/realtime/translations/calls", webrtc_views.create_translation_call, name="translation_calls"),
    path("v1/realtime/slots", views.slots, name="slots"),
    path("v1/realtime/calls", call_routes.create_call, name="calls"),
    path("v1/realtime/calls/<slug:call_id>", call_routes.call, name="call"),
    path("v1/realtime/calls/<slug:call_id>/hangup", call_views.hang_up, name="call_hangup"),
    path("v1/realtime/calls/<slug:call_id>/accept", sip_views.accept, name="call_accept"),
    path("v1/realtime/calls/<slug:call_id>/reject", sip_views.reject, name="call_reject"),
    path("v1/realtime/calls/<slug:call_id>/refer", sip_views.refer, name="call_refer"),
    path("v1/realtime/sessions/<str:session_id>/timings", views.session_timings, name="session_timings"),
    path("admin/", admin.site.urls),
]
