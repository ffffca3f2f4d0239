"""Stored prompts: what ``prompt: {id, version, variables}`` of a session or a response names.

A :class:`Prompt` (id ``pmpt_...``) has numbered :class:`PromptVersion`\\ s; each version's
``instructions`` may hold ``{{variable}}`` placeholders, with defaults in ``variables``.
Operators edit them in the admin; sessions read them through ``Prompt.objects.versions_of``.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

from pipelines.ids import new_id
from realtime.protocol.prompts import StoredPrompt, pick


def new_prompt_id() -> str:
    return new_id("pmpt")


def check_defaults(value: object) -> None:
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ValidationError('Expected an object of variable names to text, e.g. {"city": "Paris"}.')


class PromptManager(models.Manager["Prompt"]):
    def versions_of(self, prompt_id: str) -> dict[str, StoredPrompt]:
        """Every version of prompt ``prompt_id``, by version number as the API names it ("1", "2"...)."""
        rows = PromptVersion.objects.filter(prompt_id=prompt_id).values_list("version", "instructions", "variables")
        return {
            str(version): StoredPrompt(prompt_id, str(version), text, dict(defaults or {}))
            for version, text, defaults in rows
        }

    def lookup(self, prompt_id: str, version: str | None) -> StoredPrompt:
        """The version asked for (None: the newest); raises ``PromptError`` (a ``PromptLookup``)."""
        return pick(self.versions_of(prompt_id), prompt_id, version)


class Prompt(models.Model):
    id = models.CharField(primary_key=True, max_length=64, default=new_prompt_id)
    name = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    objects = PromptManager()

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.id})" if self.name else self.id


class PromptVersion(models.Model):
    prompt = models.ForeignKey(Prompt, on_delete=models.CASCADE, related_name="versions")
    version = models.PositiveIntegerField()
    instructions = models.TextField(help_text="The instructions a session or response gets; {{name}} is a variable.")
    variables = models.JSONField(
        default=dict,
        blank=True,
        validators=[check_defaults],
        help_text='Defaults of the variables, e.g. {"city": "Paris"}.',
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["prompt", "-version"]
        constraints = [models.UniqueConstraint(fields=["prompt", "version"], name="unique_prompt_version")]

    def __str__(self) -> str:
        return f"{self.prompt_id} v{self.version}"
