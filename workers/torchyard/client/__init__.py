"""The `torchyard` command's side of the server: what `cli.py` runs once it has parsed the arguments.

    http       the REST API (JSON calls, `HEAD` probes, streamed uploads and downloads)
    specfile   JobSpec files (YAML or JSON) and the spec `torchyard run` builds from its flags
    upload     packing a project directory into a bundle and uploading it unless the server has it
    follow     following a job over its WebSocket and rendering it (logs, state, per-node progress)
    artifacts  listing and downloading a job's artifacts
    tokens     signing in (`torchyard login`) and your API tokens: create, list, revoke
"""

from __future__ import annotations


class CliError(Exception):
    """A failure the user can act on. The CLI prints its message (no traceback) and exits with 2.

    A request the server refused keeps the server's answer: `heading` ("POST /api/jobs: HTTP 400")
    and `errors` (its decoded body, DRF's field errors), so a caller can name the fields as the
    user wrote them (a Go scheduler task's `params`, say)."""

    def __init__(self, message: str, *, heading: str = "", errors: object = None) -> None:
        super().__init__(message)
        self.heading, self.errors = heading, errors
