"""Supervisors (issue 51): an API key made with ``create_api_key --supervisor``, the permission a staff user needs
(``realtime.supervise_live_session``), and the record of each listen, whisper, take-over and hand-back."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("realtime", "0012_outbound_calls")]

    operations = [
        migrations.AddField(
            model_name="apikey",
            name="supervisor",
            field=models.BooleanField(
                default=False,
                help_text=(
                    "May listen to, whisper to, take over and hand back any live session (create_api_key --supervisor)."
                ),
            ),
        ),
        migrations.CreateModel(
            name="SupervisorAction",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                (
                    "kind",
                    models.CharField(
                        choices=[
                            ("listen", "listened"),
                            ("whisper", "whispered"),
                            ("take_over", "took over"),
                            ("hand_back", "handed back"),
                        ],
                        db_index=True,
                        max_length=16,
                    ),
                ),
                (
                    "actor",
                    models.CharField(help_text='The staff user\'s name, or "key:NAME" for an API key.', max_length=200),
                ),
                ("text", models.TextField(blank=True, help_text="What was whispered.")),
                ("started_at", models.DateTimeField(db_index=True)),
                ("ended_at", models.DateTimeField(blank=True, null=True)),
                (
                    "session",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="supervisor_actions",
                        to="realtime.realtimesession",
                    ),
                ),
            ],
            options={
                "ordering": ["session", "started_at", "id"],
                "permissions": [("supervise_live_session", "Can supervise live sessions")],
            },
        ),
    ]
