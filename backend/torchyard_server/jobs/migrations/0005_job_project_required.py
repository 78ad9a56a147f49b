import django.db.models.deletion
from django.db import migrations, models

import torchyard_server.projects.models


class Migration(migrations.Migration):

    dependencies = [
        ("jobs", "0004_job_project"),
    ]

    operations = [
        migrations.AlterField(
            model_name="job",
            name="project",
            field=models.ForeignKey(default=torchyard_server.projects.models.default_project_pk, on_delete=django.db.models.deletion.PROTECT, related_name="jobs", to="projects.project"),
        ),
    ]
