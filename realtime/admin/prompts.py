"""Admin for stored prompts: a prompt and its versions, edited on one page."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Max, QuerySet
from django.http import HttpRequest

from realtime.prompt_models import Prompt, PromptVersion


class PromptVersionInline(admin.StackedInline):
    model = PromptVersion
    extra = 1
    fields = ("version", "instructions", "variables", "created_at")
    readonly_fields = ("created_at",)

    def get_formset(self, request: HttpRequest, obj: Prompt | None = None, **kwargs: Any) -> Any:
        """The blank version starts as the next number (1 for a new prompt): left as it is, with no
        instructions, the blank form is unchanged and skipped; filled in, it needs no number typed."""
        formset = super().get_formset(request, obj, **kwargs)
        formset.form.base_fields["version"].initial = next_version(obj)
        return formset


def next_version(prompt: Prompt | None) -> int:
    if prompt is None or prompt.pk is None:
        return 1
    return (prompt.versions.aggregate(top=Max("version"))["top"] or 0) + 1


@admin.register(Prompt)
class PromptAdmin(admin.ModelAdmin):
    list_display = ("id", "name", "latest_version", "created_at")
    search_fields = ("id", "name", "versions__instructions")
    readonly_fields = ("created_at",)
    fields = ("id", "name", "created_at")
    inlines = (PromptVersionInline,)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Prompt]:
        return super().get_queryset(request).annotate(latest=Max("versions__version"))

    @admin.display(description="latest version", ordering="latest")
    def latest_version(self, obj: Prompt) -> int | None:
        return getattr(obj, "latest", None)
