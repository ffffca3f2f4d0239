"""Admin for API keys and client secrets: a new key is shown once, in the message after saving."""

from __future__ import annotations

import secrets
from typing import Any

from django.contrib import admin, messages
from django.http import HttpRequest
from django.utils import timezone

from realtime.access import auth
from realtime.auth_models import ApiKey, ClientSecret
from realtime.node import cluster


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = ("name", "prefix", "created_at", "last_used_at", "revoked_at", "is_active")
    list_filter = ("revoked_at",)
    search_fields = ("name", "prefix")
    readonly_fields = ("prefix", "created_at", "last_used_at")
    fields = ("name", "prefix", "created_at", "last_used_at", "revoked_at")
    actions = ("revoke",)

    @admin.display(boolean=True, description="active")
    def is_active(self, obj: ApiKey) -> bool:
        return obj.active

    def save_model(self, request: HttpRequest, obj: ApiKey, form: Any, change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        key = auth.KEY_PREFIX + secrets.token_urlsafe(32)
        obj.prefix, obj.key_hash = key[:12], auth.hash_token(key)
        super().save_model(request, obj, form, change)
        messages.warning(request, f"The new key is {key} — copy it now: it is not stored and cannot be shown again.")

    @admin.action(description="Revoke the selected keys")
    def revoke(self, request: HttpRequest, queryset: Any) -> None:
        ids = list(queryset.filter(revoked_at__isnull=True).values_list("pk", flat=True))
        count = ApiKey.objects.filter(pk__in=ids).update(revoked_at=timezone.now())
        for key_id in ids:  # an UPDATE sends no post_save: end their live sessions here
            cluster.end_key_sessions(key_id)
        messages.success(request, f"{count} key(s) revoked; their live sessions are being ended.")


@admin.register(ClientSecret)
class ClientSecretAdmin(admin.ModelAdmin):
    list_display = ("id", "api_key", "created_at", "expires_at", "used_at", "session_id")
    list_filter = ("used_at",)
    search_fields = ("session_id",)
    readonly_fields = [f.name for f in ClientSecret._meta.fields if f.name != "secret_hash"]
    exclude = ("secret_hash",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # minted through POST /v1/realtime/client_secrets only
