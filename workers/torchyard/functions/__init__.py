"""Python functions on the cluster: `torchyard.fn`, `Compute`, `Volume`, the `compute` and
`distribute` decorators (remote.py, compute.py), the environment a function runs in
(`torchyard.images`, images.py), the runner every rank runs (runner.py); the results that come back
are torchyard/function_results.py, which the supervisor and the CLI read too."""

from torchyard.function_results import RemoteError
from torchyard.functions import images
from torchyard.functions.compute import Compute, Distribution, FunctionError, Volume
from torchyard.functions.images import Image
from torchyard.functions.remote import (
    FunctionRun,
    RemoteFunction,
    compute,
    distribute,
    fn,
    on_node,
)

__all__ = ["Compute", "Distribution", "FunctionError", "FunctionRun", "Image", "RemoteError", "RemoteFunction",
           "Volume", "compute", "distribute", "fn", "images", "on_node"]
