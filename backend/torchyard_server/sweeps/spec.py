"""A sweep as submitted (`torchyard sweep sweep.yaml`, POST /api/sweeps): its shape checked field by
field, then its trial checked as the JobSpec every trial will be (with the space's first point as
hyperparameters), so that a sweep that cannot run one trial is refused before it starts.

    name: lr-search
    project: default                   # the trials' project: its quota and priority apply to each
    trial: {entrypoint: train.py, resources: {nodes: 1, procs_per_node: 1}}
    space: {lr: {loguniform: [1.0e-4, 1.0e-1]}, batch_size: {choice: [16, 32, 64]}}
    searcher: {name: asha, metric: val_loss, mode: min, max_trials: 12, max_concurrent: 4}
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from ..jobs.intake.serializer import JobSpecSerializer
from ..projects.models import DEFAULT_PROJECT
from ..rest.strict import StrictFields
from . import study

MAX_TRIALS = 10_000


class SearcherSerializer(StrictFields, serializers.Serializer):
    name = serializers.ChoiceField(choices=list(study.SEARCHERS), default="tpe", help_text=(
        "grid (every point of the space), random, tpe (Optuna's default), asha (TPE, and trials stopped early at "
        "rungs: Successive Halving) or hyperband"))
    metric = serializers.RegexField(r"^[A-Za-z_][A-Za-z0-9_.]{0,99}$", help_text=(
        "the name a trial reports with sdk.report(step=..., NAME=value): its last value is the trial's result"))
    mode = serializers.ChoiceField(choices=["min", "max"], default="min")
    max_trials = serializers.IntegerField(min_value=1, max_value=MAX_TRIALS, required=False, help_text=(
        "how many trials in all (default: every point of a grid, else 10)"))
    max_concurrent = serializers.IntegerField(min_value=1, max_value=1000, default=4,
                                              help_text="trials running (or queued) at once")
    max_failures = serializers.IntegerField(min_value=0, max_value=MAX_TRIALS, required=False, help_text=(
        "failed trials the sweep survives (default: a quarter of max_trials); one more fails the sweep"))
    min_steps = serializers.IntegerField(min_value=1, max_value=10_000_000, default=10, help_text=(
        "asha, hyperband: the first rung's step; each next rung is reduction_factor times further"))
    max_steps = serializers.IntegerField(min_value=1, max_value=10_000_000, required=False,
                                         help_text="hyperband: the steps a trial runs at most")
    reduction_factor = serializers.IntegerField(min_value=2, max_value=10, default=3, help_text=(
        "asha, hyperband: 1 in reduction_factor of the trials reaching a rung go on"))
    seed = serializers.IntegerField(required=False, help_text="the sampler's seed, for a repeatable search")


def _space_entry(name: str, entry: Any) -> dict[str, Any]:
    if not isinstance(entry, dict) or len(entry) != 1:
        raise serializers.ValidationError({name: [f"one of {', '.join(study.KINDS)} with its values, e.g. "
                                                  "{loguniform: [1.0e-4, 1.0e-1]} or {choice: [16, 32]}."]})
    ((kind, values),) = entry.items()
    if kind not in study.KINDS:
        raise serializers.ValidationError({name: [f"unknown kind {kind!r}; one of {', '.join(study.KINDS)}."]})
    if kind in ("choice", "grid"):
        if not isinstance(values, list) or not values or len(values) > 1000:
            raise serializers.ValidationError({name: [f"{kind}: a list of 1 to 1000 values."]})
        if any(not isinstance(v, (str, int, float, bool)) and v is not None for v in values):
            raise serializers.ValidationError({name: [f"{kind}: each value a string, a number, true, false or null."]})
        return {kind: values}
    numbers = isinstance(values, list) and len(values) == 2 and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
    if not numbers or not values[0] < values[1]:
        raise serializers.ValidationError({name: [f"{kind}: [low, high], two numbers, low < high."]})
    if kind == "loguniform" and values[0] <= 0:
        raise serializers.ValidationError({name: ["loguniform: low must be above 0."]})
    if kind == "int" and not all(isinstance(v, int) for v in values):
        raise serializers.ValidationError({name: ["int: [low, high], two integers."]})
    return {kind: values}


class SpaceField(serializers.DictField):
    """Each hyperparameter's kind and values: choice, uniform, loguniform, int or grid."""

    def to_internal_value(self, data: Any) -> dict[str, dict[str, Any]]:
        data = super().to_internal_value(data)
        if not data:
            raise serializers.ValidationError("name at least one hyperparameter.")
        errors: dict[str, Any] = {}
        space = {}
        for name, entry in data.items():
            try:
                space[str(name)] = _space_entry(str(name), entry)
            except serializers.ValidationError as exc:
                errors.update(exc.detail)  # type: ignore[arg-type]
        if errors:
            raise serializers.ValidationError(errors)
        return space


class SweepSpecSerializer(StrictFields, serializers.Serializer):
    name = serializers.CharField(max_length=200)
    project = serializers.CharField(max_length=63, default=DEFAULT_PROJECT)
    trial = serializers.DictField(help_text=(
        "the JobSpec of every trial, without its name (each trial is named <sweep>-<number>); the trial's "
        "hyperparameters are the space's point merged over its own hyperparameters, read with sdk.config()"))
    space = SpaceField(help_text="each hyperparameter: {choice|grid: [...]}, {uniform|loguniform: [low, high]} or {int: [low, high]}")
    searcher = SearcherSerializer()

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        searcher, space = attrs["searcher"], attrs["space"]
        if searcher["name"] == "grid":
            ranged = [n for n, e in space.items() if next(iter(e)) not in ("choice", "grid")]
            if ranged:
                raise serializers.ValidationError({"space": {n: ["a grid search takes lists of values: "
                                                               "{grid: [...]} or {choice: [...]}."] for n in ranged}})
            points = study.grid_size(space)
            searcher.setdefault("max_trials", min(points, MAX_TRIALS))
        else:
            searcher.setdefault("max_trials", 10)
        searcher.setdefault("max_failures", searcher["max_trials"] // 4)
        if searcher["name"] == "hyperband":
            searcher.setdefault("max_steps", searcher["min_steps"] * searcher["reduction_factor"] ** 3)
        if "name" in attrs["trial"]:
            raise serializers.ValidationError({"trial": {"name": ["each trial is named <sweep>-<number>: leave it out."]}})
        checked = JobSpecSerializer(data=trial_spec(attrs, 0, first_point(space)))
        if not checked.is_valid():
            raise serializers.ValidationError({"trial": checked.errors})
        return attrs


def first_point(space: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A point of the space, to check the trial's JobSpec with."""
    point: dict[str, Any] = {}
    for name, entry in space.items():
        ((kind, values),) = entry.items()
        point[name] = values[0]
    return point


def trial_spec(sweep: dict[str, Any], number: int, params: dict[str, Any]) -> dict[str, Any]:
    """The JobSpec of trial `number`: the sweep's trial, named after the sweep, in its project, the
    point's hyperparameters over the trial's own."""
    trial = dict(sweep["trial"])
    return {**trial, "name": f"{sweep['name']}-{number}", "project": sweep.get("project") or DEFAULT_PROJECT,
            "hyperparameters": {**(trial.get("hyperparameters") or {}), **params}}
