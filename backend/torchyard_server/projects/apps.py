from django.apps import AppConfig


class ProjectsConfig(AppConfig):
    name = "torchyard_server.projects"
    label = "projects"

    def ready(self) -> None:
        from django.contrib.auth import get_user_model
        from django.db.models.signals import post_save

        from .services import user_joined

        post_save.connect(user_joined, sender=get_user_model(), dispatch_uid="projects.user_joined")
