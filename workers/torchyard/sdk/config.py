"""The job's planned configuration, read from the JSON file named by TORCHYARD_CONFIG."""

from __future__ import annotations

import functools
import json
import os
from typing import Any

from torchyard import protocol
from torchyard.sdk import context
from torchyard.sdk.scaling import LR_KEYS, adjust_hyperparameters

SECTIONS = ("hyperparameters", "scaling", "distributed", "checkpointing", "compression", "resources", "fault_tolerance")


@functools.lru_cache(maxsize=4)
def _read(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError) as exc:
        raise RuntimeError(
            f"cannot read the Torchyard job config {path!r} ({protocol.ENV_CONFIG}): {exc}"
        ) from exc
    if not isinstance(data, dict):
        raise RuntimeError(f"the Torchyard job config {path!r} is not a JSON object")
    return data


def job_config() -> dict[str, Any]:
    """The whole planned config ({} outside Torchyard); every known section is present, maybe empty."""
    path = os.environ.get(protocol.ENV_CONFIG, "").strip()
    data = _read(path) if path else {}
    merged = {section: dict(data.get(section) or {}) for section in SECTIONS}
    merged.update({k: v for k, v in data.items() if k not in SECTIONS})
    return merged


def config(defaults: dict[str, Any] | None = None) -> dict[str, Any]:
    """Hyperparameters for this rank, after the distributed adjustments of ``scaling``.

    ``defaults`` fill in what the job did not set (the script's own defaults; a learning rate the job
    gives as ``lr`` or ``learning_rate`` replaces a default under either name), then the scaling mode
    of the job applies (see torchyard.sdk.scaling); outside Torchyard the mode is ``none``. The result
    also holds ``world_size``, ``rank`` and ``global_batch_size``.
    """
    planned = job_config()
    defaults = dict(defaults or {})
    if any(planned["hyperparameters"].get(key) is not None for key in LR_KEYS):
        # The job's learning rate by either name (the Go scheduler's `learning_rate`) is the one that
        # counts and is scaled: a default `lr` must not stand beside it and be taken first.
        for key in LR_KEYS:
            defaults.pop(key, None)
    hyperparameters = {**defaults, **planned["hyperparameters"]}
    return adjust_hyperparameters(hyperparameters, planned["scaling"], context.world_size(), context.rank())
