"""Outbound calls in the audit (issue 52): a phone call's direction, an outbound call's status, why it ended and
its INVITE's final SIP answer; the permission to place a call from the admin."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("realtime", "0011_session_owner")]

    operations = [
        migrations.AlterModelOptions(
            name="realtimesession",
            options={
                "ordering": ["-started_at"],
                "permissions": [
                    ("end_live_session", "Can end a live session"),
                    ("place_outbound_call", "Can place an outbound phone call"),
                ],
            },
        ),
        migrations.AddField(
            model_name="realtimesession",
            name="direction",
            field=models.CharField(
                blank=True,
                choices=[("inbound", "inbound"), ("outbound", "outbound")],
                db_index=True,
                max_length=8,
            ),
        ),
        migrations.AddField(
            model_name="realtimesession",
            name="call_status",
            field=models.CharField(blank=True, max_length=16),
        ),
        migrations.AddField(
            model_name="realtimesession",
            name="call_end_reason",
            field=models.CharField(blank=True, max_length=32),
        ),
        migrations.AddField(
            model_name="realtimesession",
            name="sip_code",
            field=models.IntegerField(blank=True, null=True),
        ),
    ]
