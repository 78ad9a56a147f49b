from torchyard.lifeline import watch_launcher

from .celery import app as celery_app

# Web, controller, beat and ingest all import this package first: started by `torchyard-server run`,
# each ends when the launcher does, however it ends (torchyard/lifeline.py); elsewhere a no-op.
watch_launcher()

__all__ = ("celery_app",)
