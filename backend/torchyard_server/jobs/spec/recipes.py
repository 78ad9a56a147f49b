"""The built-in recipes (torchyard/examples): their names, their docstrings' summaries, and the
DistroML model and dataset names a JobSpec may give instead of an entrypoint."""

from __future__ import annotations

import ast
import posixpath
from pathlib import Path

import torchyard

RECIPES_DIR = Path(torchyard.__file__).resolve().parent / "examples"
# DistroML's `model` names, mapped to the built-in recipe that trains them.
MODEL_RECIPES = {"mlp": "examples/mlp_ddp.py", "char_gpt": "examples/char_gpt.py", "transformer": "examples/char_gpt.py"}
# DistroML's `dataset` names (torchyard.sdk.datasets), each with the built-in recipes that train on
# it; the first is the one a spec without a model or entrypoint runs.
DATASET_RECIPES = {"synthetic": ("examples/mlp_ddp.py", "examples/mlp_fsdp.py"), "digits": ("examples/mlp_ddp.py",),
                   "python-source": ("examples/char_gpt.py",)}


def builtin_recipes() -> list[str]:
    return sorted(f"examples/{p.name}" for p in RECIPES_DIR.glob("*.py") if not p.name.startswith("_"))


def recipe_catalog() -> list[dict[str, str]]:
    """The built-in recipes with the first paragraph of their docstring, read without importing them."""
    catalog = []
    for entrypoint in builtin_recipes():
        source = (RECIPES_DIR / posixpath.basename(entrypoint)).read_text(encoding="utf-8")
        docstring = ast.get_docstring(ast.parse(source)) or ""
        # Plain text for the dashboard and the CLI: docstrings mark code up as ``name``.
        summary = " ".join(docstring.split("\n\n", 1)[0].split()).replace("``", "")
        catalog.append({"entrypoint": entrypoint, "summary": summary})
    return catalog


# The built-in recipes that train through sdk.resilient, whose ranks fault_tolerance.mode in_place can
# replace alone.
IN_PLACE_RECIPES = ("examples/mlp_ddp.py",)

# The built-in recipes whose state every rank holds whole (DDP): what a memory checkpoint
# (checkpointing.memory) copies. The sharded ones save through torch.distributed.checkpoint to disk/S3.
MEMORY_RECIPES = ("examples/mlp_ddp.py", "examples/char_gpt.py")
