"""The optimizer a built-in recipe trains with, built from the job's hyperparameters
(torchyard.recipe_params names and checks them). A module of its own because it imports torch: the
control plane imports recipe_params, and never torch."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from torchyard.recipe_params import OPTIMIZERS, learning_rate


def build_optimizer(parameters: Any, hp: Mapping[str, Any], *, default: str, weight_decay: float = 0.0) -> Any:
    """torch's optimizer the job names (`optimizer`, else `default`) with its learning rate,
    `weight_decay` (else the recipe's) and, for sgd, `momentum` (else 0)."""
    name = str(hp.get("optimizer") or default)
    decay = float(hp["weight_decay"]) if hp.get("weight_decay") is not None else weight_decay
    lr = learning_rate(hp)
    if name == "sgd":
        return torch.optim.SGD(parameters, lr=lr, momentum=float(hp.get("momentum") or 0.0), weight_decay=decay)
    if name == "adam":
        return torch.optim.Adam(parameters, lr=lr, weight_decay=decay)
    if name == "adamw":
        return torch.optim.AdamW(parameters, lr=lr, weight_decay=decay)
    raise ValueError(f"optimizer {name!r}: the recipes build {', '.join(OPTIMIZERS)}")
