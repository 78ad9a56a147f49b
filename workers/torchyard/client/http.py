"""The server's REST API over the standard library's urllib, authenticated with an API token.

Every failure becomes a CliError with a readable message: a 400 answer lists the server's field
errors one per line (`  resources.nodes: ...`), an unreachable server names the URL.
"""

from __future__ import annotations

import contextlib
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from http.client import HTTPResponse
from pathlib import Path
from typing import IO, Any

from . import CliError

DEFAULT_TIMEOUT_S = 30.0
# After the last byte of an upload the server checks the whole archive (and may copy it into S3)
# before it answers: much longer than an ordinary call.
UPLOAD_TIMEOUT_S = 600.0


def format_errors(errors: Any, prefix: str = "") -> str:
    """DRF's error document as indented `field.path: message` lines (`detail` is no field)."""
    if isinstance(errors, dict):
        return "\n".join(format_errors(v, f"{prefix}{k}." if k != "detail" else prefix) for k, v in errors.items())
    if isinstance(errors, list):
        return "\n".join(format_errors(v, prefix) for v in errors)
    return f"  {prefix.rstrip('.') or 'error'}: {errors}"


def _decoded(request: urllib.request.Request, raw: bytes) -> Any:
    """A JSON answer's document (None when empty); anything else (a proxy's page) is a CliError."""
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        path = urllib.parse.urlsplit(request.full_url).path
        raise CliError(f"{request.get_method()} {path}: the answer is not JSON (is this a Torchyard server?)") from None


class _ProgressReader:
    """A file that reports every block http.client reads from it, for the upload's progress bar."""

    def __init__(self, handle: IO[bytes], on_progress: Callable[[int], None]) -> None:
        self._handle = handle
        self._on_progress = on_progress

    def read(self, size: int = -1) -> bytes:
        block = self._handle.read(size)
        if block:
            self._on_progress(len(block))
        return block


class ApiClient:
    """One server and one API token (None: the first call that needs one says how to get one)."""

    def __init__(self, server: str, token: str | None) -> None:
        self.server = server.rstrip("/")
        self.token = token

    def _headers(self, **extra: str) -> dict[str, str]:
        if not self.token:
            raise CliError("no API token: pass --api-token or set TORCHYARD_TOKEN (see `torchyard login`)")
        return {"Authorization": f"Token {self.token}", "Accept": "application/json", **extra}

    def auth_headers(self) -> dict[str, str]:
        """The headers that authenticate a request (the WebSocket handshake needs them too)."""
        return {"Authorization": self._headers()["Authorization"]}

    def _failure(self, request: urllib.request.Request, exc: OSError) -> CliError:
        """A failed request as one readable error: the server's answer, or why it could not be reached."""
        if isinstance(exc, urllib.error.HTTPError):
            detail, errors = exc.read().decode(errors="replace"), None
            with contextlib.suppress(ValueError):
                errors = json.loads(detail)
                detail = format_errors(errors)
            path = urllib.parse.urlsplit(request.full_url).path
            heading = f"{request.get_method()} {path}: HTTP {exc.code}"
            return CliError(heading + (f"\n{detail}" if detail else ""), heading=heading, errors=errors)
        return CliError(f"cannot reach {self.server}: {getattr(exc, 'reason', exc)}")

    @contextlib.contextmanager
    def _open(self, request: urllib.request.Request, timeout: float) -> Iterator[HTTPResponse]:
        try:
            response = urllib.request.urlopen(request, timeout=timeout)
        except OSError as exc:  # urllib's HTTPError and URLError are OSErrors
            raise self._failure(request, exc) from None
        with response:
            yield response

    def call(self, method: str, path: str, body: Any = None, *, anonymous: bool = False) -> Any:
        """A JSON request; returns the decoded answer (None for an empty one). `anonymous`: without
        the token (signing in with a password, which is how one gets a token)."""
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Accept": "application/json"} if anonymous else self._headers()
        request = urllib.request.Request(self.server + path, data=data, method=method,
                                         headers={**headers, "Content-Type": "application/json"})
        with self._open(request, DEFAULT_TIMEOUT_S) as response:
            return _decoded(request, response.read())

    def exists(self, path: str) -> bool:
        """`HEAD path`: True for 200, False for 404; anything else is an error."""
        request = urllib.request.Request(self.server + path, method="HEAD", headers=self._headers())
        try:
            with urllib.request.urlopen(request, timeout=DEFAULT_TIMEOUT_S):
                return True
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return False
            raise self._failure(request, exc) from None
        except OSError as exc:
            raise self._failure(request, exc) from None

    def put_file(self, path: str, file: Path, on_progress: Callable[[int], None]) -> Any:
        """`PUT path` with the file's bytes as the body, streamed from disk (never read whole into
        memory); `on_progress(n)` is called for every block sent. Returns the decoded JSON answer."""
        size = file.stat().st_size
        with open(file, "rb") as handle:
            # An explicit Content-Length: without it urllib would send a file chunked, which the
            # server refuses (it checks the declared size against its limit before reading).
            request = urllib.request.Request(
                self.server + path, data=_ProgressReader(handle, on_progress), method="PUT",
                headers=self._headers(**{"Content-Type": "application/octet-stream", "Content-Length": str(size)}),
            )
            with self._open(request, UPLOAD_TIMEOUT_S) as response:
                return _decoded(request, response.read())

    @contextlib.contextmanager
    def download(self, path: str) -> Iterator[HTTPResponse]:
        """`GET path` as an open response to read the body from in blocks."""
        # `*/*`: the server negotiates its error answers among its JSON renderers, and a view that
        # streams a file would be refused (406) for an Accept those renderers cannot satisfy.
        request = urllib.request.Request(self.server + path, method="GET", headers=self._headers(Accept="*/*"))
        with self._open(request, DEFAULT_TIMEOUT_S) as response:
            yield response

    def websocket_url(self, path: str) -> str:
        """The ws:// (or wss://) URL of `path` on this server."""
        parts = urllib.parse.urlsplit(self.server)
        scheme = {"http": "ws", "https": "wss"}.get(parts.scheme, parts.scheme)
        return f"{scheme}://{parts.netloc}{parts.path}{path}"
