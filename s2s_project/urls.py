from __future__ import annotations

from django.contrib import admin
from django.urls import path

from realtime import auth_views, views

urlpatterns = [
    path("", views.index, name="index"),
    path("healthz", views.healthz, name="healthz"),
    path("readyz", views.readyz, name="readyz"),
    path("metrics", views.metrics, name="metrics"),
    path("v1/realtime/client_secrets", auth_views.client_secrets, name="client_secrets"),
    path("admin/", admin.site.urls),
]
