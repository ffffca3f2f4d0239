# API keys and client secrets: only hashes are stored.

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("realtime", "0002_audit_records_nodes"),
    ]

    operations = [
        migrations.CreateModel(
            name="ApiKey",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("name", models.CharField(help_text="Who or what uses the key.", max_length=200)),
                (
                    "prefix",
                    models.CharField(
                        db_index=True, help_text="The key's first characters, to recognise it.", max_length=16
                    ),
                ),
                ("key_hash", models.CharField(editable=False, max_length=64, unique=True)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("last_used_at", models.DateTimeField(blank=True, null=True)),
                (
                    "revoked_at",
                    models.DateTimeField(
                        blank=True, help_text="Set to revoke the key; it stops working at once.", null=True
                    ),
                ),
            ],
            options={"verbose_name": "API key", "ordering": ["-created_at"]},
        ),
        migrations.CreateModel(
            name="ClientSecret",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("secret_hash", models.CharField(editable=False, max_length=64, unique=True)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("expires_at", models.DateTimeField(db_index=True)),
                ("used_at", models.DateTimeField(blank=True, null=True)),
                ("session_id", models.CharField(blank=True, help_text="The session it opened.", max_length=64)),
                (
                    "session_config",
                    models.JSONField(blank=True, default=dict, help_text="The session settings it was minted with."),
                ),
                (
                    "api_key",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="client_secrets",
                        to="realtime.apikey",
                    ),
                ),
            ],
            options={"ordering": ["-created_at"]},
        ),
    ]
