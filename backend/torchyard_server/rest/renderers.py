"""Download routes answer a client that accepts only the file's type (`Accept:
application/octet-stream`), instead of DRF's 406: the file itself is a FileResponse that skips
rendering, and an error body is still JSON, and says so in its Content-Type.

The file itself is a StreamedFileResponse. Django serves a FileResponse's file (a synchronous
iterator) to an ASGI server by reading it whole into a list first (it warns "StreamingHttpResponse
must consume synchronous iterators"): a 60 MB code bundle or a 1 GB checkpoint file sat in the web
process's memory, and its first byte left only after its last was read. StreamedFileResponse reads
the file a block at a time in a worker thread, as the client takes it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator

from asgiref.sync import sync_to_async
from django.http import FileResponse
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


class StreamedFileResponse(FileResponse):
    # Django's 4 kB default means thousands of ASGI messages per MB. Its ASGI handler replaces it
    # with the handler's chunk_size, which asgi.py sets to this.
    block_size = 1 << 20

    def _set_streaming_content(self, value) -> None:
        super()._set_streaming_content(value)
        # Django's own attributes, set just above (from a file: a sync iterator of blocks).
        if not self.is_async:  # type: ignore[has-type]
            blocks: Iterator[bytes] = self._iterator  # type: ignore[has-type]
            self._iterator = _read_in_thread(blocks)
            self.is_async = True


def _next_block(blocks: Iterator[bytes]) -> bytes:
    return next(blocks, b"")


async def _read_in_thread(blocks: Iterator[bytes]) -> AsyncIterator[bytes]:
    # Not thread-sensitive: a download must not queue behind the sync views on Django's one thread.
    read = sync_to_async(_next_block, thread_sensitive=False)
    while block := await read(blocks):
        yield block
