from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("realtime", "0013_supervision"),
    ]

    operations = [
        migrations.AddField(
            model_name="realtimesession",
            name="unit_rebuild",
            field=models.CharField(
                blank=True,
                help_text="Why its unit was rebuilt when the session ended (it could not drain).",
                max_length=200,
            ),
        ),
    ]
