from django.apps import AppConfig


class TemplatesConfig(AppConfig):
    """Saved job templates (TransformerLab's "tasks"): a JobSpec kept under a name in a project, submitted
    again and again as it is or pinned to one machine. Above jobs, whose validation and submission
    it reuses; the seed's `/api/tasks` routes (app `network`) sit on top of it."""

    name = "torchyard_server.templates"
    label = "templates"
