"""The built-in data sources a JobSpec's ``dataset`` names (DistroML's JobSpec, DistroML).

Nothing is downloaded at run time: a dataset is generated, or read from files a package on the
registries ships (installed with ``pip install 'torchyard[datasets]'``), so a node without
network access trains on it all the same. torch and the packages are imported only by the loaders.
"""

from __future__ import annotations

from typing import Any

from torchyard.sdk.choices import DATASETS, INSTALL_DATASETS
from torchyard.sdk.config import job_config

__all__ = ["DATASETS", "DatasetUnavailable", "load_digits", "selected"]


class DatasetUnavailable(RuntimeError):
    """A dataset whose package is missing on this machine; the message names the install command."""


def selected(default: str) -> str:
    """The job's ``dataset`` (its config), else ``default`` (outside Torchyard, or not given)."""
    return str(job_config().get("dataset") or default)


def load_digits() -> tuple[Any, Any]:
    """scikit-learn's digits as tensors: inputs (1797, 64) float32 scaled to [0, 1] (the pixels
    are 0..16), labels (1797,) int64 in 0..9, in the file's fixed order (the same on every rank)."""
    try:
        from sklearn.datasets import load_digits as sklearn_load_digits
    except ImportError as exc:
        raise DatasetUnavailable(
            f"dataset 'digits' is read from scikit-learn, which is not installed for this Python; "
            f"install it on every node: {INSTALL_DATASETS} (or pip install scikit-learn)"
        ) from exc
    import torch

    digits = sklearn_load_digits()
    inputs = torch.as_tensor(digits.data, dtype=torch.float32) / 16.0
    return inputs, torch.as_tensor(digits.target, dtype=torch.int64)
