"""The controller's Celery app: queue "control" (planning, dispatch, supervision) plus beat."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "torchyard_server.settings")

app = Celery("torchyard_server")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
