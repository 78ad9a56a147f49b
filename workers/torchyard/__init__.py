"""Torchyard's machine side: the agent, the node supervisor and the training SDK, and the client
a researcher calls (`torchyard.fn`, `torchyard.Compute`, the `compute`/`distribute` decorators).

Nothing here imports the server (backend/); the SDK imports only the standard library and torch.
The function API is imported on first use, so the agent, the supervisor and the control plane,
which import this package, never load it.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# torchyard.<name> -> the module that defines it, imported when first asked for.
_LAZY = {
    "fn": "torchyard.functions",
    "compute": "torchyard.functions",
    "distribute": "torchyard.functions",
    "Compute": "torchyard.functions",
    "Volume": "torchyard.functions",
    "RemoteError": "torchyard.functions",
    "FunctionError": "torchyard.functions",
    "FunctionRun": "torchyard.functions",
}


def __getattr__(name: str) -> Any:
    if name == "sdk":
        return importlib.import_module("torchyard.sdk")
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'torchyard' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), "sdk", *_LAZY])
