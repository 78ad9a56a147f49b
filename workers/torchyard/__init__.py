"""Torchyard's machine side: the agent, the node supervisor and the training SDK, and the client
a researcher calls (`torchyard.fn`, `torchyard.Compute`, `torchyard.images`, the
`compute`/`distribute` decorators; `torchyard.distributed.pod_ips` inside a job).

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
    "Image": "torchyard.functions",
    "images": "torchyard.functions",
}
# torchyard.<name> -> a submodule, imported when first asked for.
_SUBMODULES = {"sdk": "torchyard.sdk", "distributed": "torchyard.distributed"}


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(_SUBMODULES[name])
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'torchyard' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_SUBMODULES, *_LAZY])
