"""Everyone in the default project from the start: every existing user a member of it (staff its
admins), so a single user, or a team that never makes a project, never meets projects."""

from django.conf import settings
from django.db import migrations


def create_default(apps, schema_editor):
    Project = apps.get_model("projects", "Project")
    Membership = apps.get_model("projects", "Membership")
    User = apps.get_model(*settings.AUTH_USER_MODEL.split("."))
    project, _ = Project.objects.get_or_create(name="default", defaults={"description": "Everyone, from the first user on."})
    for user in User.objects.all():
        Membership.objects.get_or_create(project=project, user=user,
                                         defaults={"role": "admin" if user.is_staff else "member"})


class Migration(migrations.Migration):

    dependencies = [
        ("projects", "0001_initial"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [migrations.RunPython(create_default, migrations.RunPython.noop)]
