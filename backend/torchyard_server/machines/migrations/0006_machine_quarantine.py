from django.db import migrations, models
from django.db.models import F


def suspects_to_quarantine(apps, schema_editor):
    # A machine suspect when this runs was named by a stall verdict: it is quarantined from then on,
    # released by its health check when its suspicion would have ended.
    Machine = apps.get_model("machines", "Machine")
    Machine.objects.filter(probation_until__isnull=False).update(quarantined_at=F("updated_at"), status="quarantined")


class Migration(migrations.Migration):

    dependencies = [
        ("machines", "0005_machine_suspect"),
    ]

    operations = [
        migrations.RenameField(model_name="machine", old_name="suspect_until", new_name="probation_until"),
        migrations.RenameField(model_name="machine", old_name="suspect_reason", new_name="quarantine_reason"),
        migrations.AlterField(
            model_name="machine",
            name="probation_until",
            field=models.DateTimeField(blank=True, null=True, help_text="When its agent's health check may release it (null: only an operator does)."),
        ),
        migrations.AlterField(
            model_name="machine",
            name="quarantine_reason",
            field=models.CharField(blank=True, help_text="Why it is quarantined.", max_length=500),
        ),
        migrations.AddField(
            model_name="machine",
            name="quarantined_at",
            field=models.DateTimeField(blank=True, null=True, help_text="Since when nothing is placed here: a hang's verdict named one of its ranks (null: not quarantined)."),
        ),
        migrations.AddField(
            model_name="machine",
            name="quarantine_job",
            field=models.PositiveBigIntegerField(blank=True, null=True, help_text="The job whose hang named it (an id: the job may be deleted since)."),
        ),
        migrations.AddField(
            model_name="machine",
            name="health",
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.AlterField(
            model_name="machine",
            name="status",
            field=models.CharField(choices=[("pending", "Pending"), ("online", "Online"), ("busy", "Busy"), ("draining", "Draining"), ("quarantined", "Quarantined"), ("offline", "Offline")], db_index=True, default="pending", max_length=16),
        ),
        migrations.RunPython(suspects_to_quarantine, migrations.RunPython.noop),
    ]
