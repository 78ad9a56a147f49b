"""A sweep's life: created (its study made, its first trials submitted), moved on (`sweep_advance`:
what its trials reported goes to the searcher, a trial the pruner stops is stopped, ended trials are
told, new ones asked while there is room), stopped and resumed. Each trial is a job like any other,
queued under its project's quota and priority; the sweep only decides which jobs to submit and
which to stop.

sweep_advance runs with the sweep's row locked, from the beat's tick (every 2 s for each running
sweep), a trial's job ending (hooks.py) and the API's actions: two at once wait for each other."""

from __future__ import annotations

import logging
import uuid
from typing import Any

from django.db import transaction
from django.utils import timezone
from rest_framework.exceptions import ValidationError

from ..jobs.control.admission import admit_spec, submittable_project
from ..jobs.control.stop import job_stop
from ..jobs.control.submit import job_submit
from ..jobs.errors import SpecRefused
from ..jobs.intake.serializer import JobSpecSerializer
from ..jobs.models import Job
from ..jobs.placement.candidates import PlanError
from ..jobs.spec.jobspec import JobSpec
from ..jobs.states import JOB_FINAL
from ..streaming.models import JobEvent
from . import study as searcher_study
from .models import Sweep, Trial
from .spec import first_point, trial_spec

log = logging.getLogger(__name__)
S, T = Sweep.Status, Trial.Status
# What a stopped trial's reason ends with once a resumed sweep asked its point again.
RUN_AGAIN = "; its point runs again in the resumed sweep"


def sweep_create(*, spec: dict[str, Any], owner) -> Sweep:
    """A sweep from its checked spec (spec.SweepSpecSerializer), its project's admission as a job's."""
    project = submittable_project(spec["project"], owner)  # refused as a job there would be
    # Its first trial admitted as a job now (its bundle, its priority): refused before anything is made.
    checked = JobSpecSerializer(data=trial_spec(spec, 0, first_point(spec["space"])))
    checked.is_valid(raise_exception=True)
    admit_spec(checked.validated_data, user=owner)
    # Its study is made as it first moves on (study.load).
    sweep = Sweep.objects.create(name=spec["name"], project=project, owner=owner, spec=spec,
                                 study_name=f"sweep-{uuid.uuid4().hex[:16]}")
    sweep_advance(sweep.pk)
    return sweep


def sweep_advance(sweep_id: int) -> None:
    with transaction.atomic():
        sweep = Sweep.objects.select_for_update().filter(pk=sweep_id).first()
        if sweep is None or sweep.status not in (S.RUNNING, S.STOPPING):
            return
        spec = sweep.spec
        study = searcher_study.load(sweep.study_name, spec["searcher"], spec["space"])
        for trial in sweep.trials.filter(status=T.RUNNING).select_related("job"):
            _follow(sweep, study, trial)
        if sweep.status == S.RUNNING:
            _ask(sweep, study)
        _settle(sweep)


def _follow(sweep: Sweep, study, trial: Trial) -> None:
    """What the trial's job reported since last time goes to the searcher (rank 0's metric, each
    step once); the pruner may stop it; its job's end ends it."""
    searcher, job = sweep.spec["searcher"], trial.job
    metric = searcher["metric"]
    if job is None:  # deleted by hand
        _end(study, trial, T.FAILED, "its job was deleted")
        return
    fresh: list[tuple[int, float]] = []
    last = trial.last_event_id
    for event_id, payload in (JobEvent.objects.filter(job_id=job.pk, type="metric", id__gt=trial.last_event_id)
                              .filter(rank=0).order_by("id").values_list("id", "payload")[:5000]):
        last = event_id
        value, step = payload.get(metric), payload.get("step")
        if isinstance(value, (int, float)) and not isinstance(value, bool) and isinstance(step, int) \
                and (trial.step is None or step > trial.step):
            fresh.append((step, float(value)))
            trial.step, trial.value = step, float(value)
    trial.last_event_id = last
    stopped_at = searcher_study.report(study, trial.optuna_trial_id, fresh, searcher) if fresh else None
    if stopped_at is not None and job.status not in JOB_FINAL:
        step, value = stopped_at
        why = searcher_study.rung_comparison(study, trial.optuna_trial_id, searcher["mode"],
                                             int(searcher["reduction_factor"]))
        stopped = job_stop(job_id=job.pk, reason=f"pruned by sweep {sweep.name} at step {step}: {why}")
        if stopped is None or stopped.status != Job.Status.COMPLETED:
            trial.step, trial.value = step, value
            _end(study, trial, T.PRUNED, f"pruned at step {step} ({metric} {value:.6g}): {why}")
            return
        job = stopped  # it completed meanwhile: a finished trial is not pruned
    if job.status == Job.Status.COMPLETED:
        if trial.value is None:
            _end(study, trial, T.FAILED, f"its job completed without reporting {metric}")
        else:
            _end(study, trial, T.COMPLETED, f"{metric} {trial.value:.6g} at step {trial.step}")
    elif job.status == Job.Status.FAILED:
        _end(study, trial, T.FAILED, f"its job failed: {job.status_reason}"[:1000])
    elif job.status == Job.Status.STOPPED:
        _end(study, trial, T.STOPPED, f"its job was stopped: {job.status_reason}"[:1000])
    else:
        trial.save(update_fields=["step", "value", "last_event_id"])


def _end(study, trial: Trial, status: str, reason: str) -> None:
    outcome: searcher_study.Outcome = {T.COMPLETED: "complete", T.PRUNED: "pruned"}.get(status, "fail")  # type: ignore[assignment]
    searcher_study.finish(study, trial.number, outcome, trial.value)
    trial.status, trial.reason, trial.finished_at = status, reason, timezone.now()
    trial.save(update_fields=["status", "reason", "finished_at", "step", "value", "last_event_id"])


def _ask(sweep: Sweep, study) -> None:
    """New trials while fewer than max_concurrent run and fewer than max_trials were asked."""
    searcher = sweep.spec["searcher"]
    failed = sweep.trials.filter(status=T.FAILED).count()
    if failed > int(searcher["max_failures"]):
        _stop_running(sweep, f"{failed} trials failed, more than searcher.max_failures ({searcher['max_failures']})")
        sweep.status, sweep.reason = S.FAILED, f"{failed} trials failed (max_failures {searcher['max_failures']})"
        sweep.finished_at = timezone.now()
        sweep.save(update_fields=["status", "reason", "finished_at"])
        return
    running = sweep.trials.filter(status=T.RUNNING).count()
    asked = _counted(sweep).count()
    while running < int(searcher["max_concurrent"]) and asked < int(searcher["max_trials"]):
        if searcher["name"] == "grid" and searcher_study.grid_exhausted(study):
            break
        asked_trial = searcher_study.ask(study, sweep.spec["space"])
        params = dict(asked_trial.params)
        try:
            job = _submit(sweep, asked_trial.number, params)
        except (PlanError, ValidationError, SpecRefused) as exc:
            searcher_study.finish(study, asked_trial.number, "fail")
            why = exc.detail if isinstance(exc, ValidationError) else exc.errors if isinstance(exc, SpecRefused) else str(exc)
            _stop_running(sweep, f"a trial cannot run: {why}")
            sweep.status, sweep.reason, sweep.finished_at = S.FAILED, f"trial {asked_trial.number} cannot run: {why}"[:1000], timezone.now()
            sweep.save(update_fields=["status", "reason", "finished_at"])
            return
        Trial.objects.create(sweep=sweep, number=asked_trial.number, optuna_trial_id=asked_trial._trial_id,
                             job=job, params=params)
        running += 1
        asked += 1


def _counted(sweep: Sweep):
    """The trials that count towards max_trials: every one but those stopped with their sweep (a
    resumed sweep runs their points again)."""
    return sweep.trials.exclude(status=T.STOPPED)


def _submit(sweep: Sweep, number: int, params: dict[str, Any]) -> Job:
    checked = JobSpecSerializer(data=trial_spec(sweep.spec, number, params))
    checked.is_valid(raise_exception=True)
    spec = JobSpec.from_json(admit_spec(checked.validated_data, user=sweep.owner))
    return job_submit(spec=spec, owner=sweep.owner)


def _settle(sweep: Sweep) -> None:
    """A sweep with nothing running ends: stopped when stopping, completed once every trial was asked."""
    if sweep.trials.filter(status=T.RUNNING).exists() or sweep.status not in (S.RUNNING, S.STOPPING):
        return
    searcher = sweep.spec["searcher"]
    if sweep.status == S.STOPPING:
        sweep.status = S.STOPPED
    elif _counted(sweep).count() >= int(searcher["max_trials"]) or searcher["name"] == "grid":
        sweep.status = S.COMPLETED
        best = best_trial(sweep)
        sweep.reason = (f"{_counted(sweep).count()} trials; best: trial {best.number}, {searcher['metric']} "
                        f"{best.value:.6g}" if best is not None else "no trial completed")[:1000]
    else:
        return
    sweep.finished_at = timezone.now()
    sweep.save(update_fields=["status", "reason", "finished_at"])


def best_trial(sweep: Sweep) -> Trial | None:
    done = sweep.trials.filter(status=T.COMPLETED, value__isnull=False)
    # Of trials as good, the first (the same point asked twice trains to the same value).
    return done.order_by("value" if sweep.spec["searcher"]["mode"] == "min" else "-value", "number").first()


def _stop_running(sweep: Sweep, reason: str) -> int:
    running = list(sweep.trials.filter(status=T.RUNNING, job__isnull=False).values_list("job_id", flat=True))
    for job_id in running:
        job_stop(job_id=job_id, reason=reason)
    return len(running)


def sweep_stop(*, sweep_id: int, reason: str = "stop requested") -> Sweep | None:
    """Every running trial's job stopped; the sweep is stopped once they all are."""
    with transaction.atomic():
        sweep = Sweep.objects.select_for_update().filter(pk=sweep_id).first()
        if sweep is None or sweep.status != S.RUNNING:
            return sweep
        sweep.status, sweep.reason = S.STOPPING, reason
        sweep.save(update_fields=["status", "reason"])
        _stop_running(sweep, f"sweep {sweep.name}: {reason}")
    sweep_advance(sweep_id)
    sweep.refresh_from_db()
    return sweep


def sweep_resume(*, sweep_id: int) -> Sweep | None:
    """A stopped sweep runs on where it was: the points of its stopped trials first, then new ones."""
    with transaction.atomic():
        sweep = Sweep.objects.select_for_update().filter(pk=sweep_id).first()
        if sweep is None or sweep.status != S.STOPPED:
            return sweep
        spec = sweep.spec
        study = searcher_study.load(sweep.study_name, spec["searcher"], spec["space"])
        for trial in sweep.trials.filter(status=T.STOPPED).exclude(reason__endswith=RUN_AGAIN):
            study.enqueue_trial(trial.params, skip_if_exists=False)
            trial.reason = f"{trial.reason[:900]}{RUN_AGAIN}"
            trial.save(update_fields=["reason"])
        sweep.status, sweep.reason, sweep.finished_at = S.RUNNING, "resumed", None
        sweep.save(update_fields=["status", "reason", "finished_at"])
    sweep_advance(sweep_id)
    sweep.refresh_from_db()
    return sweep
