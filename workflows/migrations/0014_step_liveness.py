"""Step liveness (issue 22): a per-call bound, an error budget in time, worker heartbeats.

Steps made before it keep retry_for_seconds 0 (their budget counts attempts only, as it
did) and no call_timeout_seconds (their type's bound applies: workflows.engine.attempts).
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("workflows", "0013_api_tokens"),
    ]

    operations = [
        migrations.CreateModel(
            name="WorkerBeat",
            fields=[
                ("owner", models.CharField(max_length=255, primary_key=True, serialize=False)),
                ("started_at", models.DateTimeField()),
                ("beat_at", models.DateTimeField()),
            ],
        ),
        migrations.AddField(
            model_name="steprun",
            name="call_timeout_seconds",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="steprun",
            name="failing_since",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="steprun",
            name="retry_for_seconds",
            field=models.PositiveIntegerField(db_default=0, default=0),
        ),
    ]
