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
    """A failure the user can act on. The CLI prints its message (no traceback) and exits with 2."""
