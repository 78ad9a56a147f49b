import signal
import threading

from django.conf import settings
from django.core.management.base import BaseCommand

from torchyard_server.streaming.ingest import Ingest


class Command(BaseCommand):
    help = "Run the controller's event ingest loop (Redis stream -> database -> WebSockets)."

    def handle(self, *args, **options):
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        signal.signal(signal.SIGINT, lambda *_: stop.set())
        Ingest(settings.REDIS_URL).run(stop)
