from __future__ import annotations

from django.contrib import admin
from django.urls import path

from realtime import views

urlpatterns = [
    path("", views.index, name="index"),
    path("healthz", views.healthz, name="healthz"),
    path("readyz", views.readyz, name="readyz"),
    path("metrics", views.metrics, name="metrics"),
    path("admin/", admin.site.urls),
]
