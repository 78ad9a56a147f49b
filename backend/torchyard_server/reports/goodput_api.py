"""`GET /api/jobs/{id}/goodput` (one job's wall time split into what it went to, per attempt too) and
`GET /api/usage/goodput` (the same, rolled up per project, user or machine, with GPU-hours and
their cost). reports/goodput.py says what each part is and which wins where two overlap."""

from __future__ import annotations

import datetime as dt
from typing import TypedDict

from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from ..jobs.models import Job
from ..jobs.selectors import job_visible_or_404
from ..jobs.states import JOB_LIVE
from ..projects.permissions import visible_project_ids
from ..usage.api import DEFAULT_WINDOW, moment
from .goodput import Split
from .goodput_ledger import GROUPS, goodput_rollup, job_split


class GoodputPartsOut(serializers.Serializer):
    """Seconds of wall time per category; they add up to the wall time (reports/goodput.py)."""

    queued = serializers.FloatField(help_text="waiting in the queue to start")
    preempted = serializers.FloatField(help_text="yielding to another job after a preemption, then waiting to resume")
    code_fetch = serializers.FloatField(help_text="before the first step: fetching and unpacking the code bundle")
    environment_build = serializers.FloatField(help_text="before the first step: building the job's environment")
    launch = serializers.FloatField(help_text=(
        "before the first step: the launch, preflight, rendezvous and the script's own start"))
    training = serializers.FloatField(help_text="stepping: the productive time (goodput)")
    checkpoint = serializers.FloatField(help_text="checkpoint saves holding the training loop")
    recovery = serializers.FloatField(help_text=(
        "after a failure: stopping the other nodes, the back-off, the re-plan, waiting for machines"))
    lost_work = serializers.FloatField(help_text=(
        "steps computed, then redone after resuming from an earlier checkpoint"))
    hang = serializers.FloatField(help_text="from the last progress to the detection of a stall or a lost node")
    idle = serializers.FloatField(help_text="running without stepping: long pauses, after the last step, stopping")


class GoodputAttemptOut(serializers.Serializer):
    attempt = serializers.IntegerField()
    started_at = serializers.DateTimeField(help_text="its dispatch; attempt 0's is the job's submission")
    ended_at = serializers.DateTimeField(help_text="the next attempt's dispatch, or the job's end (or now)")
    wall_seconds = serializers.FloatField()
    goodput = serializers.FloatField(min_value=0, max_value=1, help_text="training / wall_seconds")
    parts = GoodputPartsOut()


class JobGoodputOut(serializers.Serializer):
    job = serializers.IntegerField()
    status = serializers.ChoiceField(choices=Job.Status.choices)
    live = serializers.BooleanField(help_text="not ended: ended_at is now, and the parts still grow")
    started_at = serializers.DateTimeField(help_text="the job's submission")
    ended_at = serializers.DateTimeField(help_text="when it ended, or now")
    wall_seconds = serializers.FloatField()
    goodput = serializers.FloatField(min_value=0, max_value=1, help_text="training / wall_seconds")
    parts = GoodputPartsOut()
    attempts = GoodputAttemptOut(many=True, help_text="each attempt's share of the wall time, split the same way")


class GoodputRollupRowOut(serializers.Serializer):
    key = serializers.CharField(help_text="the project's, user's or machine's name; `all` for the overall row")
    jobs = serializers.IntegerField()
    wall_seconds = serializers.FloatField(help_text="the parts' sum")
    goodput = serializers.FloatField(min_value=0, max_value=1, help_text="training / wall_seconds")
    parts = GoodputPartsOut()
    gpu_hours = serializers.FloatField(help_text="what the jobs' nodes held, from their start to their end (or now)")
    productive_gpu_hours = serializers.FloatField(help_text="of those, the ones spent training")
    cost = serializers.FloatField(allow_null=True, help_text=(
        "the nodes' time at their machines' prices; null when none of them ran on a priced machine"))
    wasted_cost = serializers.FloatField(allow_null=True, help_text="the part of `cost` not spent training")


class GoodputRollupOut(serializers.Serializer):
    by = serializers.ChoiceField(choices=list(GROUPS))
    since = serializers.DateTimeField(help_text="jobs that ended since then are counted, whole, with the live ones")
    until = serializers.DateTimeField(help_text="now")
    rows = GoodputRollupRowOut(many=True, help_text="most wall time first")
    overall = GoodputRollupRowOut(help_text="every counted job once (by machine, the rows may share a job)")


class SplitOut(TypedDict):
    """A split as the job's goodput shows it, overall and per attempt."""

    started_at: dt.datetime
    ended_at: dt.datetime
    wall_seconds: float
    goodput: float
    parts: dict[str, float]  # {category: seconds}


def _split_out(split: Split) -> SplitOut:
    return {
        "started_at": dt.datetime.fromtimestamp(split.start, tz=dt.UTC),
        "ended_at": dt.datetime.fromtimestamp(split.end, tz=dt.UTC),
        "wall_seconds": round(split.wall, 3), "goodput": round(min(max(split.goodput, 0.0), 1.0), 6),
        "parts": {category: round(seconds, 3) for category, seconds in split.parts.items()},
    }


class JobGoodputView(APIView):
    """Where the job's wall time went, from its submission to its end (or now): queued, preempted,
    code fetch, environment build, launch, training, checkpoints, recovery, lost work, hangs and idle
    time, overall and per attempt. The parts add up to the wall time; goodput is training over it."""

    @extend_schema(responses=JobGoodputOut)
    def get(self, request, job_id: int):
        job = job_visible_or_404(user=request.user, job_id=job_id)
        split = job_split(job, now=timezone.now())
        return Response(JobGoodputOut({
            "job": job.pk, "status": job.status, "live": job.status in JOB_LIVE, **_split_out(split),
            "attempts": [{"attempt": a.attempt, **_split_out(a)} for a in split.attempts],
        }).data)


class GoodputRollupView(APIView):
    """Goodput per project, user or machine over the jobs of the projects you may see that ended in
    the window or still run, with their GPU-hours and what those cost at the machines' prices (staff
    set them on each machine)."""

    @extend_schema(responses=GoodputRollupOut, parameters=[
        OpenApiParameter("by", str, enum=list(GROUPS), description="group by project (default), user or machine"),
        OpenApiParameter("since", str, description=(
            "jobs that ended since then (and the live ones): ISO date-time, date, or an age such as 7d (default 7d)")),
        OpenApiParameter("project", str, description="only this project's jobs"),
    ])
    def get(self, request):
        params = request.query_params
        by = params.get("by") or "project"
        if by not in GROUPS:
            raise ValidationError({"by": [f"one of {', '.join(GROUPS)}."]})
        now = timezone.now()
        since = moment(params.get("since"), "since", now - DEFAULT_WINDOW, now)
        if since >= now:
            raise ValidationError({"since": ["must be in the past."]})
        report = goodput_rollup(by=by, since=since, now=now, project_ids=visible_project_ids(request.user),
                                project=params.get("project") or None)
        return Response(GoodputRollupOut(report).data)
