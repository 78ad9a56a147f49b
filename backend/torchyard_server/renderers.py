"""Download routes answer a client that accepts only the file's type (`Accept:
application/octet-stream`), instead of DRF's 406: the file itself is a FileResponse that skips
rendering, and an error body is still JSON."""

from __future__ import annotations

import json

from rest_framework.renderers import BaseRenderer, JSONRenderer


class _FileRenderer(BaseRenderer):
    charset = None

    def render(self, data, accepted_media_type=None, renderer_context=None):
        if isinstance(data, bytes):
            return data
        return json.dumps(data, default=str).encode()


class OctetStreamRenderer(_FileRenderer):
    media_type = "application/octet-stream"
    format = "bin"


class ZipRenderer(_FileRenderer):
    media_type = "application/zip"
    format = "zip"


DOWNLOAD_RENDERERS = [JSONRenderer, OctetStreamRenderer, ZipRenderer]
