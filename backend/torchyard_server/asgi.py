"""ASGI entry point for daphne: HTTP (Django) and WebSockets (Channels) on one port."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "torchyard_server.settings")
django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402

from torchyard_server.live.auth import BrowserOriginValidator, TokenOrSessionAuthMiddleware  # noqa: E402
from torchyard_server.live.backpressure import SendBacklogProbe  # noqa: E402
from torchyard_server.live.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        # The admin's CSS/JS, served by daphne itself so embedded mode needs no other web server;
        # the probe lets a streamed response (live/sse.py) see what a slow client leaves unread.
        "http": SendBacklogProbe(ASGIStaticFilesHandler(django_asgi_app)),
        # Outermost: it needs daphne's own `send` to see what a slow client leaves unread.
        "websocket": SendBacklogProbe(
            BrowserOriginValidator(TokenOrSessionAuthMiddleware(URLRouter(websocket_urlpatterns)))),
    }
)
