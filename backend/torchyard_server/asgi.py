"""ASGI entry point for daphne: HTTP (Django) and WebSockets (Channels) on one port."""

import os

import django
from django.core.handlers.asgi import ASGIHandler

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "torchyard_server.settings")
django.setup(set_prefix=False)  # what get_asgi_application() does before it makes its handler

from torchyard_server.rest.renderers import StreamedFileResponse  # noqa: E402


class _DjangoHandler(ASGIHandler):
    """Django's ASGI handler, sending our downloads' blocks whole. It gives every FileResponse its
    own chunk_size (64 KiB) as block size and reads each block in a thread: at that size a 60 MB
    download (a code bundle to a node, an artifact) was 950 thread hops, most of its time."""

    chunk_size = StreamedFileResponse.block_size


django_asgi_app = _DjangoHandler()

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
