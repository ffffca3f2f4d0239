# Stored prompts (realtime.prompt_models), written to match what makemigrations generates.

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models

import realtime.prompt_models


class Migration(migrations.Migration):
    dependencies = [
        ("realtime", "0006_session_transport"),
    ]

    operations = [
        migrations.CreateModel(
            name="Prompt",
            fields=[
                (
                    "id",
                    models.CharField(
                        default=realtime.prompt_models.new_prompt_id, max_length=64, primary_key=True, serialize=False
                    ),
                ),
                ("name", models.CharField(blank=True, max_length=200)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
            ],
            options={
                "ordering": ["-created_at"],
            },
        ),
        migrations.CreateModel(
            name="PromptVersion",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("version", models.PositiveIntegerField()),
                (
                    "instructions",
                    models.TextField(help_text="The instructions a session or response gets; {{name}} is a variable."),
                ),
                (
                    "variables",
                    models.JSONField(
                        blank=True,
                        default=dict,
                        help_text='Defaults of the variables, e.g. {"city": "Paris"}.',
                        validators=[realtime.prompt_models.check_defaults],
                    ),
                ),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "prompt",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="versions", to="realtime.prompt"
                    ),
                ),
            ],
            options={
                "ordering": ["prompt", "-version"],
                "constraints": [models.UniqueConstraint(fields=("prompt", "version"), name="unique_prompt_version")],
            },
        ),
    ]
