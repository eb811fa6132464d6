"""StepRun.waits_for_person: set from the step type's flag when a run starts its steps.

Steps made before it: only the built-in `approval` type waited for a person then.
"""

from typing import Any

from django.db import migrations, models


def _approvals(apps: Any, schema_editor: Any) -> None:
    apps.get_model("workflows", "StepRun").objects.filter(type="approval").update(
        waits_for_person=True
    )


class Migration(migrations.Migration):
    dependencies = [
        ("workflows", "0008_bypass"),
    ]

    operations = [
        migrations.AddField(
            model_name="steprun",
            name="waits_for_person",
            field=models.BooleanField(default=False),
        ),
        migrations.RunPython(_approvals, migrations.RunPython.noop),
    ]
