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


def _sampler(searcher: dict[str, Any], space: dict[str, dict[str, Any]]) -> optuna.samplers.BaseSampler:
    optuna = _optuna()
    seed = searcher.get("seed")
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


def create(study_name: str, searcher: dict[str, Any]) -> None:
    _optuna().create_study(study_name=study_name, storage=storage(), load_if_exists=True,
                        direction="minimize" if searcher["mode"] == "min" else "maximize")


def load(study_name: str, searcher: dict[str, Any], space: dict[str, dict[str, Any]]) -> optuna.Study:
    return _optuna().load_study(study_name=study_name, storage=storage(), sampler=_sampler(searcher, space),
                             pruner=_pruner(searcher))


def ask(study: optuna.Study, space: dict[str, dict[str, Any]]) -> optuna.trial.Trial:
    return study.ask(distributions(space))


def trial(study: optuna.Study, trial_id: int) -> optuna.trial.Trial:
    return _optuna().trial.Trial(study, trial_id)


def grid_exhausted(study: optuna.Study) -> bool:
    sampler = study.sampler
    return isinstance(sampler, _optuna().samplers.GridSampler) and sampler.is_exhausted(study)


def report(study: optuna.Study, trial_id: int, values: list[tuple[int, float]]) -> bool:
    """Report a running trial's new (step, value) pairs; whether the pruner says to stop it now."""
    found = trial(study, trial_id)
    for step, value in values:
        found.report(value, step)
    return bool(values) and found.should_prune()


def finish(study: optuna.Study, number: int, outcome: Outcome, value: float | None = None) -> None:
    state = getattr(_optuna().trial.TrialState, {"complete": "COMPLETE", "pruned": "PRUNED", "fail": "FAIL"}[outcome])
    try:
        study.tell(number, value if outcome == "complete" else None, state=state)
    except RuntimeError as exc:  # already finished (a redelivered tick): nothing to do
        log.info("sweep study %s trial %s: %s", study.study_name, number, exc)


def rung_comparison(study: optuna.Study, number: int, step: int, value: float, mode: str,
                    reduction_factor: int) -> str:
    """Why a trial was pruned at `step`, in the rung's own terms: how many trials reached that step,
    how many of them go on, and the value the last of those had."""
    reached = sorted(v for t in study.get_trials(deepcopy=False)
                     if (v := _at_or_before(t.intermediate_values, step)) is not None)
    if mode == "max":
        reached.reverse()
    kept = max(1, len(reached) // reduction_factor)
    cut = reached[kept - 1] if reached else value
    return (f"{'lowest' if mode == 'min' else 'highest'} {kept} of the {len(reached)} trials that reached step {step} "
            f"go on; its {value:.6g} is behind the cut of {cut:.6g}")


def _at_or_before(values: dict[int, float], step: int) -> float | None:
    steps = [s for s in values if s <= step]
    return values[max(steps)] if steps else None
