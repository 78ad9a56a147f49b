"""What a JobSpec may choose of the SDK's: the built-in datasets and the gradient compression hooks
with their settings. Plain data, no torch: the control plane validates specs against it, and
torchyard.sdk.datasets and torchyard.sdk.compression act on it."""

from __future__ import annotations

from typing import Any

INSTALL_DATASETS = "pip install 'torchyard[datasets]'"
# Name -> what it is; the control plane shows these and refuses any other name.
DATASETS = {
    "synthetic": "random inputs labelled by a fixed random teacher network: endless, generated on every rank",
    "digits": "handwritten digits 0-9, 1,797 8x8 grey images (UCI optical recognition set), read from the "
              f"scikit-learn wheel: nothing is downloaded (needs {INSTALL_DATASETS} on the nodes)",
    "python-source": "the source text of a fixed list of Python standard-library modules (about 450 KB), "
                     "read from the node's own Python",
}

HOOKS = ("none", "fp16", "bf16", "powersgd", "topk")
# The settings each hook takes, with their defaults (the JobSpec refuses them for another hook).
HOOK_SETTINGS: dict[str, dict[str, Any]] = {"powersgd": {"rank": 1, "start_iter": 10}, "topk": {"ratio": 0.01}}
# PowerSGD's error feedback needs two plain steps first, while DDP settles its buckets (torch refuses less).
MIN_START_ITER = 2
