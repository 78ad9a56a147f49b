"""What the built-in recipes (torchyard/examples) read of a job's hyperparameters, and the parts of
their training loops those settings drive: the optimizer, and how many steps a number of epochs is.

DistroML's JobSpec (`hyperparameters.epochs`) and the Go scheduler's task params (`optimizer`,
`momentum`, `weight_decay`, `epochs`, `learning_rate`) name settings a recipe either honours or
refuses: `problems()` says which, by name, on the control plane before anything runs (it imports
this module without torch) and in the recipe itself when it runs outside Torchyard. The optimizer
these settings build is torchyard.recipe_optimizer's: this module never imports torch.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping, Sequence
from typing import Any

OPTIMIZERS = ("sgd", "adam", "adamw")
# The samples in an epoch of synthetic data (endless otherwise) when epochs are asked for and the
# job declares no dataset_size.
SYNTHETIC_EPOCH = 10_000
DIGITS_TRAIN = 1_500  # mlp_ddp's digits: the first 1,500 images train, the last 297 are held out
DEFAULT_STEPS = 300

# What every recipe that trains reads, with what it means to it.
COMMON = {
    "batch_size": "the batch (global under scaling keep_global_batch, else per rank)",
    "lr": "the learning rate",
    "learning_rate": "the learning rate, by the Go scheduler's name (give lr or learning_rate)",
    "epochs": "passes over the training data; the recipe trains that many instead of --steps",
    "optimizer": f"{', '.join(OPTIMIZERS)}",
    "momentum": "sgd's momentum (optimizer sgd only)",
    "weight_decay": "the optimizer's weight decay",
}
MLP = {
    **COMMON,
    "hidden": "the width of the MLP's two hidden layers",
    "input_dim": "the synthetic inputs' size (digits are 64 pixels)",
    "dataset_size": f"the samples of one epoch of synthetic data (default {SYNTHETIC_EPOCH:,} when epochs are given; "
                    "endless otherwise)",
}
CHAR_GPT = {
    **COMMON,
    "min_lr": "the learning rate the cosine decay ends at",
    "warmup_steps": "steps of linear warm-up",
    "block_size": "characters of context",
    "n_layer": "transformer blocks",
    "n_head": "attention heads",
    "n_embd": "the embedding width",
    "dropout": "dropout probability",
}
# Recipe -> {hyperparameter: what it is}: everything it reads of the job's hyperparameters.
READS: dict[str, dict[str, str]] = {
    "examples/mlp_ddp.py": MLP,
    "examples/mlp_fsdp.py": MLP,
    "examples/char_gpt.py": CHAR_GPT,
    # The Rust coordinator's demo worker takes its settings from the environment (DATASET_DIR, ...).
    "examples/seed001_worker.py": {},
}
# Each recipe's batch_size when the job gives none (the recipes' DEFAULTS read it from here).
DEFAULT_BATCH = {"examples/mlp_ddp.py": 64, "examples/mlp_fsdp.py": 64, "examples/char_gpt.py": 32}
# Each recipe's optimizer when the job names none.
DEFAULT_OPTIMIZER = {"examples/mlp_ddp.py": "adam", "examples/mlp_fsdp.py": "adam", "examples/char_gpt.py": "adamw"}


def _number(value: Any) -> float | None:
    """A finite number (a numeric string too: YAML reads 1e-3 as text), else None."""
    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _whole(value: Any) -> int | None:
    number = _number(value)
    return int(number) if number is not None and number == int(number) and number >= 1 else None


def _flag(args: Sequence[str], name: str) -> str | None:
    """The value of `--name V` / `--name=V` in an argv ("" when given without one), else None."""
    for i, arg in enumerate(args):
        if arg == name:
            return args[i + 1] if i + 1 < len(args) else ""
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def problems(recipe: str, hyperparameters: Mapping[str, Any], *, args: Sequence[str] = (),
             dataset: str | None = None) -> dict[str, str]:
    """{hyperparameter: why recipe cannot take it}; {} when it takes them all. `args` are the job's
    arguments to the recipe, `dataset` the JobSpec's. A recipe not listed in READS takes anything."""
    reads = READS.get(recipe)
    if reads is None:
        return {}
    name = recipe.removeprefix("examples/")
    found: dict[str, str] = {}
    for key in hyperparameters:
        if key not in reads:
            if not reads:
                found[key] = f"{name} reads no hyperparameters."
                continue
            near = difflib.get_close_matches(str(key), list(reads), n=1, cutoff=0.6)
            found[key] = (f"{name} does not read {key}" + (f" (did you mean {near[0]}?)" if near else "")
                          + f"; it reads {', '.join(reads)}.")
    given = {key: value for key, value in hyperparameters.items() if key in reads}
    if "lr" in given and "learning_rate" in given:
        found["learning_rate"] = "give the learning rate once: lr or learning_rate."
    for key in ("lr", "learning_rate", "momentum", "weight_decay"):
        if key in given and ((number := _number(given[key])) is None or number < 0):
            found[key] = f"must be a number, 0 or more (is {given[key]!r})."
    optimizer = given.get("optimizer", DEFAULT_OPTIMIZER.get(recipe))
    if "optimizer" in given and optimizer not in OPTIMIZERS:
        found["optimizer"] = f"{name} builds {', '.join(OPTIMIZERS)}, not {optimizer!r}."
    elif "momentum" in given and "momentum" not in found and optimizer != "sgd":
        found["momentum"] = (f"momentum is sgd's; {name} runs {optimizer} (give optimizer: sgd, or leave momentum "
                             "out).")
    if "epochs" in given:
        if _whole(given["epochs"]) is None:
            found["epochs"] = f"must be a whole number of passes over the data, 1 or more (is {given['epochs']!r})."
        elif _flag(args, "--steps") is not None:
            found["epochs"] = "give epochs or --steps in args, not both: epochs set the recipe's steps."
        elif name == "char_gpt.py" and _flag(args, "--lines") is not None:
            found["epochs"] = ("char_gpt.py reads --lines shards as a stream and cannot count an epoch ahead; give "
                               "--steps in args instead.")
    if "dataset_size" in given:
        data = _flag(args, "--dataset") or dataset or "synthetic"
        if _whole(given["dataset_size"]) is None:
            found["dataset_size"] = f"must be a whole number of samples, 1 or more (is {given['dataset_size']!r})."
        elif data != "synthetic":
            found["dataset_size"] = (f"dataset_size sizes synthetic data; {data} has its own size "
                                     f"({DIGITS_TRAIN:,} training images for digits).")
    return found


def refusals(recipe: str, hyperparameters: Mapping[str, Any], args: Sequence[str],
             dataset: str | None = None) -> list[str]:
    """The problems as lines (`hyperparameters.NAME: why`), for a recipe to print and exit with 2:
    under plain torchrun a job config may name anything, which the control plane would have refused."""
    return [f"hyperparameters.{key}: {why}" for key, why in problems(recipe, hyperparameters, args=args,
                                                                     dataset=dataset).items()]


def learning_rate(hp: Mapping[str, Any]) -> float:
    """The job's learning rate by either name (sdk.config() scaled whichever was given)."""
    return float(hp["lr"] if hp.get("lr") is not None else hp["learning_rate"])


def steps(hp: Mapping[str, Any], given: int | None, samples_per_epoch: int | None, global_batch: int) -> int:
    """The recipe's steps: `epochs` passes over `samples_per_epoch` samples in batches of
    `global_batch` (the last rounded up to a whole batch), else --steps (`given`), else DEFAULT_STEPS."""
    epochs = hp.get("epochs")
    if epochs is None:
        return DEFAULT_STEPS if given is None else given
    if not samples_per_epoch:
        raise ValueError("epochs need the samples of an epoch: this data is endless")
    return max(1, math.ceil(int(epochs) * samples_per_epoch / global_batch))


def synthetic_epoch(hp: Mapping[str, Any]) -> int | None:
    """The samples of one epoch of synthetic data: dataset_size, else SYNTHETIC_EPOCH when epochs
    are asked for; None (endless) otherwise."""
    if hp.get("dataset_size") is not None:
        return int(hp["dataset_size"])
    return SYNTHETIC_EPOCH if hp.get("epochs") is not None else None


def elastic_batch(recipe: str | None, world_sizes: Sequence[int]) -> int | None:
    """The global batch_size a recipe's elastic job under keep_global_batch runs with when the job
    gives none: the recipe's default, rounded up to a multiple of every world size of the range, so
    that each size the job may shrink or grow to divides it (the MLP's 64 over 2 or 3 processes:
    66). None for a script that is not a built-in recipe, or a default every size already divides."""
    default = DEFAULT_BATCH.get(recipe or "")
    if default is None or not world_sizes or all(default % w == 0 for w in world_sizes):
        return None
    step = math.lcm(*world_sizes)
    return -(-default // step) * step
