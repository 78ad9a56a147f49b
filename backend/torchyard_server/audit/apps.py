from django.apps import AppConfig


class AuditConfig(AppConfig):
    name = "torchyard_server.audit"
    label = "audit"
    verbose_name = "Audit log"
