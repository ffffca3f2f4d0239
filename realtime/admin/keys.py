"""Admin for API keys and client secrets: a new key is shown once, with a Copy button; Revoke is a button."""

from __future__ import annotations

import secrets
from typing import Any

from django.contrib import admin, messages
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html

from realtime.access import auth
from realtime.auth_models import ApiKey, ClientSecret

REVOKE = "_revoke"  # the name of the change form's Revoke button


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    """A key is revoked with its page's Revoke button or the list's action, never by typing a date: both save
    ``revoked_at`` on the key, so ``realtime/node/revocation.py``'s signal ends its sessions on every node."""

    list_display = ("name", "prefix", "supervisor", "created_at", "last_used_at", "revoked_at", "is_active")
    list_filter = ("revoked_at", "supervisor")
    search_fields = ("name", "prefix")
    readonly_fields = ("prefix", "created_at", "last_used_at", "revoked_at")
    fields = ("name", "prefix", "supervisor", "created_at", "last_used_at", "revoked_at")
    actions = ("revoke",)
    change_form_template = "admin/realtime/apikey/change_form.html"

    @admin.display(boolean=True, description="active")
    def is_active(self, obj: ApiKey) -> bool:
        return obj.active

    def save_model(self, request: HttpRequest, obj: ApiKey, form: Any, change: bool) -> None:
        if change:
            if REVOKE in request.POST and obj.revoked_at is None:
                obj.revoked_at = timezone.now()
                messages.success(request, f"Key {obj.name} revoked; its live sessions are being ended.")
            super().save_model(request, obj, form, change)
            return
        key = auth.KEY_PREFIX + secrets.token_urlsafe(32)
        obj.prefix, obj.key_hash = key[:12], auth.hash_token(key)
        super().save_model(request, obj, form, change)
        messages.warning(
            request,
            format_html(
                'The new key is <code id="new-api-key">{}</code> '
                '<button type="button" class="button copy-key" data-copy="new-api-key">Copy</button> '
                "— copy it now: it is not stored and cannot be shown again.",
                key,
            ),
        )

    @admin.action(description="Revoke the selected keys")
    def revoke(self, request: HttpRequest, queryset: Any) -> None:
        count = 0
        for key in queryset.filter(revoked_at__isnull=True):
            key.revoked_at = timezone.now()
            key.save(update_fields=["revoked_at"])  # post_save: the signal ends its live sessions
            count += 1
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
