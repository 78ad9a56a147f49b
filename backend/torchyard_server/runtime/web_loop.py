"""`python -m torchyard_server.web_loop daphne <daphne's arguments>`: daphne on uvloop.

daphne creates the asyncio loop that Twisted's asyncio reactor runs on when `daphne.server` is first
imported (`asyncio.new_event_loop()`, then `asyncioreactor.install`), so uvloop's policy must be set
before that import: daphne has no option for it. Twisted accepts a loop that is not a
SelectorEventLoop since 21.7 (it uses only add_reader/add_writer and the call_* methods); checked
here: HTTP, WebSockets and a clean exit on SIGTERM. The word `daphne` stays in the command line:
the launcher's generations and the tests tell the web process by it. Without uvloop installed (a
platform without its wheel) daphne runs on the standard loop.
"""

from __future__ import annotations

import asyncio
import sys


def main() -> None:
    if sys.argv[1:2] != ["daphne"]:
        raise SystemExit("usage: python -m torchyard_server.web_loop daphne <daphne's arguments>")
    try:
        import uvloop
    except ImportError:
        pass
    else:
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    from daphne.cli import CommandLineInterface

    sys.argv = ["daphne", *sys.argv[2:]]
    CommandLineInterface.entrypoint()


if __name__ == "__main__":
    main()
