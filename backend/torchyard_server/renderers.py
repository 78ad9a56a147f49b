"""Download routes answer a client that accepts only the file's type (`Accept:
application/octet-stream`), instead of DRF's 406: the file itself is a FileResponse that skips
rendering, and an error body is still JSON, and says so in its Content-Type."""

from __future__ import annotations

import json

from rest_framework.renderers import BaseRenderer, JSONRenderer


class StreamRenderer(BaseRenderer):
    """For a route whose answer is a file or a stream (which skip rendering): lets a client ask for
    that media type alone, and renders an error as JSON."""

    charset = None

    def render(self, data, accepted_media_type=None, renderer_context=None):
        if isinstance(data, bytes):
            return data
        # A JSON body (an error) says so, whatever the client asked for.
        response = (renderer_context or {}).get("response")
        if response is not None:
            response["Content-Type"] = "application/json"
        return json.dumps(data, default=str).encode()


class OctetStreamRenderer(StreamRenderer):
    media_type = "application/octet-stream"
    format = "bin"


class ZipRenderer(StreamRenderer):
    media_type = "application/zip"
    format = "zip"


DOWNLOAD_RENDERERS = [JSONRenderer, OctetStreamRenderer, ZipRenderer]
