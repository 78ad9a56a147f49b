from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from ..projects.permissions import scope_to_user, visible_or_404
from .models import Sweep, Trial
from .services import best_trial


def sweep_list(*, user: Any) -> QuerySet[Sweep]:
    return scope_to_user(Sweep.objects.select_related("project", "owner"), user)


def sweep_visible_or_404(*, user: Any, sweep_id: int) -> Sweep:
    return visible_or_404(Sweep.objects.select_related("project", "owner"), user, what="sweep", pk=sweep_id)


def sweep_state(sweep: Sweep, *, trials: bool = True) -> dict[str, Any]:
    """The sweep as the API shows it: its counts, its best trial so far, and its trials."""
    statuses = list(sweep.trials.values_list("status", flat=True))
    best = best_trial(sweep)
    state: dict[str, Any] = {
        "counts": {**{s: statuses.count(s) for s in Trial.Status.values},
                   "max_trials": int(sweep.spec["searcher"]["max_trials"])},
        "best_trial": None if best is None else {"number": best.number, "job": best.job_id,
                                                 "hyperparameters": best.params, "metric": best.value},
    }
    if trials:
        state["trials"] = list(sweep.trials.select_related("job"))
    return state
