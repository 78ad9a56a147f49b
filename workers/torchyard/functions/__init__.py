"""Python functions on the cluster: `torchyard.fn`, `Compute`, `Volume`, the `compute` and
`distribute` decorators (remote.py, compute.py), the runner every rank runs (runner.py); the results
that come back are torchyard/function_results.py, which the supervisor and the CLI read too."""

from torchyard.function_results import RemoteError
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

__all__ = ["Compute", "FunctionError", "FunctionRun", "RemoteError", "RemoteFunction", "Volume", "compute",
           "distribute", "fn", "on_node"]
