"""Python functions on the cluster: `torchyard.fn`, `Compute`, `Volume`, the `compute` and
`distribute` decorators (remote.py, compute.py), the runner every rank runs (runner.py) and the
results that come back (results.py)."""

from torchyard.functions.compute import Compute, Volume
from torchyard.functions.remote import (
    FunctionError,
    FunctionRun,
    RemoteFunction,
    compute,
    distribute,
    fn,
    on_node,
)
from torchyard.functions.results import RemoteError

__all__ = ["Compute", "FunctionError", "FunctionRun", "RemoteError", "RemoteFunction", "Volume", "compute",
           "distribute", "fn", "on_node"]
