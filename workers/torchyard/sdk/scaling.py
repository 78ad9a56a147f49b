"""Distributed adjustments of hyperparameters: pure arithmetic, no torch.

The control plane imports this module to show the plan before launch, and the SDK applies the same
function inside every rank, so what the user was shown is what runs. World size counts processes.

Modes (``scaling["mode"]``):

- ``keep_global_batch``: the user's ``batch_size`` is the global batch; each rank takes
  ``batch_size / world_size``; the learning rate is unchanged. A batch that does not divide evenly is
  refused: rounding would silently change the experiment.
- ``scale_global_batch``: each rank keeps ``batch_size``, so the global batch grows with the world;
  the learning rate is multiplied by ``world_size`` (``"lr_rule": "linear"``, default) or by its square
  root (``"lr_rule": "sqrt"``); an optional ``warmup_steps`` is passed through for the ramp.
- ``none``: nothing changes.

Dividing the batch *and* multiplying the LR (the rule in TransformerLab) would make every step world_size
times too large, so no mode does both.
"""

from __future__ import annotations

import math
from typing import Any

MODES = ("keep_global_batch", "scale_global_batch", "none")
LR_RULES = ("linear", "sqrt")
BATCH_KEY = "batch_size"
LR_KEYS = ("lr", "learning_rate")


def _batch(hyperparameters: dict[str, Any]) -> int | None:
    value = hyperparameters.get(BATCH_KEY)
    if value is None:
        return None
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            or value != int(value) or value < 1):
        raise ValueError(f"hyperparameter {BATCH_KEY} must be a positive integer, got {value!r}")
    return int(value)


def _lr_key(hyperparameters: dict[str, Any]) -> str | None:
    return next((key for key in LR_KEYS if hyperparameters.get(key) is not None), None)


def adjust_hyperparameters(
    hyperparameters: dict[str, Any] | None,
    scaling: dict[str, Any] | None,
    world_size: int,
    rank: int = 0,
) -> dict[str, Any]:
    """Return a copy of ``hyperparameters`` adjusted for ``world_size`` processes.

    The result also carries ``world_size``, ``rank`` and ``global_batch_size`` (None when there is no
    ``batch_size``). Raises ValueError for an unknown mode or LR rule, a world size below 1, or (in
    ``keep_global_batch``) a batch size that ``world_size`` does not divide.
    """
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive integer, got {world_size!r}")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is outside 0..{world_size - 1}")
    scaling = dict(scaling or {})
    mode = scaling.get("mode") or "none"
    if mode not in MODES:
        raise ValueError(f"unknown scaling mode {mode!r}; expected one of {', '.join(MODES)}")

    result = dict(hyperparameters or {})
    batch = _batch(result)
    lr_key = _lr_key(result)
    global_batch = None if batch is None else batch * world_size

    if mode == "keep_global_batch" and batch is not None:
        if batch % world_size:
            lower = (batch // world_size) * world_size
            hint = f"e.g. {lower} or {lower + world_size}" if lower else f"e.g. {world_size}"
            raise ValueError(
                f"keep_global_batch: batch_size {batch} does not divide evenly over {world_size} "
                f"processes; choose a multiple of {world_size} ({hint})"
            )
        result[BATCH_KEY] = batch // world_size
        global_batch = batch
    elif mode == "scale_global_batch":
        rule = scaling.get("lr_rule") or "linear"
        if rule not in LR_RULES:
            raise ValueError(f"unknown lr_rule {rule!r}; expected one of {', '.join(LR_RULES)}")
        if lr_key is not None:
            try:
                lr = float(result[lr_key])  # a string too: YAML reads 1e-3 as one
            except (TypeError, ValueError):
                lr = math.nan
            factor = world_size if rule == "linear" else math.sqrt(world_size)
            if not math.isfinite(lr * factor):
                raise ValueError(f"hyperparameter {lr_key} must be a finite number, got {result[lr_key]!r}")
            result[lr_key] = lr * factor
        if scaling.get("warmup_steps") is not None:
            warmup = scaling["warmup_steps"]
            if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
                raise ValueError(f"warmup_steps must be a non-negative integer, got {warmup!r}")
            result["warmup_steps"] = warmup

    result["world_size"] = world_size
    result["rank"] = rank
    result["global_batch_size"] = global_batch
    return result
