"""Who owns a session (realtime.access.owner): the hash of its credential and that credential's API key."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("realtime", "0010_sip_calls")]

    operations = [
        migrations.AddField(
            model_name="realtimesession",
            name="owner_credential",
            field=models.CharField(blank=True, editable=False, max_length=64),
        ),
        migrations.AddField(
            model_name="realtimesession",
            name="owner_key",
            field=models.ForeignKey(
                blank=True,
                editable=False,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="realtime.apikey",
            ),
        ),
    ]
