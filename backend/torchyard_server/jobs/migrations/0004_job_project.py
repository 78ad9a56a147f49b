"""Jobs belong to a project; those submitted before projects existed go to the default one."""

import django.db.models.deletion
from django.db import migrations, models


def into_default(apps, schema_editor):
    Project = apps.get_model("projects", "Project")
    Job = apps.get_model("jobs", "Job")
    project, _ = Project.objects.get_or_create(name="default", defaults={"description": "Everyone, from the first user on."})
    Job.objects.filter(project__isnull=True).update(project=project)


class Migration(migrations.Migration):

    dependencies = [
        ("jobs", "0003_alter_jobnode_status"),
        ("projects", "0002_default_project"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="project",
            field=models.ForeignKey(null=True, on_delete=django.db.models.deletion.PROTECT, related_name="jobs",
                                    to="projects.project"),
        ),
        migrations.RunPython(into_default, migrations.RunPython.noop),
    ]
