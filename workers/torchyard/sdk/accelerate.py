"""HuggingFace Accelerate, for scripts written against it."""

from __future__ import annotations

from typing import Any


def get_accelerator(**kwargs: Any):
    """An ``accelerate.Accelerator(**kwargs)``; it reads the same torchrun environment Torchyard sets.

    Raises ImportError with the install command when Accelerate is not installed.
    """
    try:
        from accelerate import Accelerator
    except ImportError as exc:
        raise ImportError(
            "sdk.get_accelerator() needs HuggingFace Accelerate, which is not installed in this "
            "environment: pip install accelerate (or use sdk.init_process_group() and sdk.wrap_ddp())"
        ) from exc
    return Accelerator(**kwargs)
