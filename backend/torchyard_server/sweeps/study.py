"""The searcher: Optuna (https://optuna.org), a well-kept library with every searcher a sweep names
(grid, random, TPE; ASHA and Hyperband as its SuccessiveHalving and Hyperband pruners), rather than
searchers written here. Its study is kept in Torchyard's own database, in Optuna's tables
(RDBStorage over SQLAlchemy, on the same PostgreSQL or SQLite file as Django's), so a sweep survives
any restart of the control plane and is read by whichever worker moves it on.

The resource the pruners count is the step a trial reports its metric at (sdk.report(step=...)).
"""

from __future__ import annotations

import functools
import logging
import math
from typing import TYPE_CHECKING, Any, Literal

from django.db import connection

if TYPE_CHECKING:
    import optuna
    from optuna.distributions import BaseDistribution

log = logging.getLogger(__name__)
# How a trial ends for the searcher.
Outcome = Literal["complete", "pruned", "fail"]


@functools.cache
def _optuna():
    """Optuna, imported when a sweep first needs it (half a second: not at every web process's start)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna

SEARCHERS = ("grid", "random", "tpe", "asha", "hyperband")
# The space's kinds: a list of values, a range of floats (evenly or on a log scale), of integers, or
# a grid's points (every one tried).
KINDS = ("choice", "uniform", "loguniform", "int", "grid")


def database_url() -> str:
    """The SQLAlchemy URL of the database Django uses right now (a test run's own database too)."""
    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    from urllib.parse import quote

    auth = quote(db.get("USER") or "", safe="")
    if db.get("PASSWORD"):
        auth += ":" + quote(db["PASSWORD"], safe="")
    host = db.get("HOST") or "localhost"
    port = f":{db['PORT']}" if db.get("PORT") else ""
    return f"postgresql+psycopg://{auth}@{host}{port}/{db['NAME']}"


@functools.lru_cache(maxsize=4)
def _storage(url: str) -> optuna.storages.RDBStorage:
    # Made once a process: it checks Optuna's tables (and creates them the first time) on creation.
    # No pool: a connection per operation, none held between a sweep's moves (Django's own hold
    # theirs; a test run's database can be dropped at its end).
    from sqlalchemy.pool import NullPool

    return _optuna().storages.RDBStorage(url, engine_kwargs={"poolclass": NullPool})


def storage() -> optuna.storages.RDBStorage:
    return _storage(database_url())


def distributions(space: dict[str, dict[str, Any]]) -> dict[str, BaseDistribution]:
    """Optuna's distribution of each hyperparameter of the space (grid points are a choice)."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    found: dict[str, BaseDistribution] = {}
    for name, spec in space.items():
        ((kind, values),) = spec.items()
        if kind in ("choice", "grid"):
            found[name] = CategoricalDistribution(list(values))
        elif kind == "uniform":
            found[name] = FloatDistribution(float(values[0]), float(values[1]))
        elif kind == "loguniform":
            found[name] = FloatDistribution(float(values[0]), float(values[1]), log=True)
        elif kind == "int":
            found[name] = IntDistribution(int(values[0]), int(values[1]))
    return found


def grid_size(space: dict[str, dict[str, Any]]) -> int:
    """How many points a grid search has (every kind must be a list of values)."""
    return math.prod(len(next(iter(spec.values()))) for spec in space.values())


def _sampler(searcher: dict[str, Any], space: dict[str, dict[str, Any]], asked: int) -> optuna.samplers.BaseSampler:
    """The sweep's sampler, made anew at each move of the sweep: with a seed, its random generator
    starts from the seed moved on by the trials already asked (a sampler made from the bare seed each
    time would draw the same first point every time)."""
    optuna = _optuna()
    seed = None if searcher.get("seed") is None else int(searcher["seed"]) + asked
    name = searcher["name"]
    if name == "grid":
        return optuna.samplers.GridSampler({k: list(next(iter(v.values()))) for k, v in space.items()}, seed=seed)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    # TPE for ASHA and Hyperband too: the pruner stops trials early, the sampler still learns.
    return optuna.samplers.TPESampler(seed=seed)


def _pruner(searcher: dict[str, Any]) -> optuna.pruners.BasePruner:
    optuna = _optuna()
    name = searcher["name"]
    if name == "asha":
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=int(searcher["min_steps"]),
                                                      reduction_factor=int(searcher["reduction_factor"]))
    if name == "hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=int(searcher["min_steps"]),
                                              max_resource=int(searcher.get("max_steps") or 100),
                                              reduction_factor=int(searcher["reduction_factor"]))
    return optuna.pruners.NopPruner()


def _create(study_name: str, searcher: dict[str, Any]) -> None:
    _optuna().create_study(study_name=study_name, storage=storage(), load_if_exists=True,
                        direction="minimize" if searcher["mode"] == "min" else "maximize")


def load(study_name: str, searcher: dict[str, Any], space: dict[str, dict[str, Any]]) -> optuna.Study:
    """The sweep's study (made first if it has none yet)."""
    try:
        study = _optuna().load_study(study_name=study_name, storage=storage(), pruner=_pruner(searcher))
    except KeyError:  # Optuna's word for "no such study"
        _create(study_name, searcher)
        return load(study_name, searcher, space)
    study.sampler = _sampler(searcher, space, len(study.get_trials(deepcopy=False)))
    return study


def ask(study: optuna.Study, space: dict[str, dict[str, Any]]) -> optuna.trial.Trial:
    return study.ask(distributions(space))


def trial(study: optuna.Study, trial_id: int) -> optuna.trial.Trial:
    return _optuna().trial.Trial(study, trial_id)


def grid_exhausted(study: optuna.Study) -> bool:
    sampler = study.sampler
    return isinstance(sampler, _optuna().samplers.GridSampler) and sampler.is_exhausted(study)


def report(study: optuna.Study, trial_id: int, values: list[tuple[int, float]],
           searcher: dict[str, Any]) -> tuple[int, float] | None:
    """Report a running trial's new (step, value) pairs, in order, asking the pruner as each one passes
    a rung (and after the last): the (step, value) it was stopped at, or None when it goes on. Asked
    at the rung as the trial passes it, so every trial is compared on the value it had there."""
    found = trial(study, trial_id)
    rungs = _rung_steps(searcher)
    previous = storage().get_trial(trial_id).last_step or 0
    for index, (step, value) in enumerate(values):
        found.report(value, step)
        crossed = any(previous < rung <= step for rung in rungs)
        previous = step
        if (crossed or index == len(values) - 1) and found.should_prune():
            return step, value
    return None


def _rung_steps(searcher: dict[str, Any]) -> list[int]:
    """The steps where Successive Halving compares trials (Hyperband's brackets among them)."""
    if searcher["name"] not in ("asha", "hyperband"):
        return []
    first, factor = int(searcher["min_steps"]), int(searcher["reduction_factor"])
    return [first * factor**k for k in range(32) if first * factor**k <= 10**9]


def finish(study: optuna.Study, number: int, outcome: Outcome, value: float | None = None) -> None:
    state = getattr(_optuna().trial.TrialState, {"complete": "COMPLETE", "pruned": "PRUNED", "fail": "FAIL"}[outcome])
    try:
        study.tell(number, value if outcome == "complete" else None, state=state)
    except RuntimeError as exc:  # already finished (a redelivered tick): nothing to do
        log.info("sweep study %s trial %s: %s", study.study_name, number, exc)


def rung_comparison(study: optuna.Study, trial_id: int, mode: str, reduction_factor: int) -> str:
    """Why the pruner stopped a trial, in Successive Halving's own terms: the rung it did not pass,
    how many trials reached it, how many of those go on, and the value of the last that does."""
    attrs = storage().get_trial(trial_id).system_attrs
    rungs = [int(key.removeprefix(_RUNG)) for key in attrs if key.startswith(_RUNG)]
    if not rungs:
        return "the pruner stopped it"
    rung = max(rungs)
    key = f"{_RUNG}{rung}"
    value = float(attrs[key])
    competing = sorted(float(a[key]) for t in study.get_trials(deepcopy=False) if key in (a := t.system_attrs))
    if mode == "max":
        competing.reverse()
    kept = max(1, len(competing) // reduction_factor)
    cut = competing[kept - 1]
    return (f"at rung {rung} the {'lowest' if mode == 'min' else 'highest'} {kept} of the {len(competing)} trials "
            f"that reached it go on (the last at {cut:.6g}); its {value:.6g} is behind")


# Successive Halving's record of the value a trial had as it passed a rung (an Optuna system attribute).
_RUNG = "completed_rung_"
