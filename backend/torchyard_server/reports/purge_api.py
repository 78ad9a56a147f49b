"""`POST /api/jobs/purge`: finished jobs older than an age, with their records and stored files."""

from __future__ import annotations

import datetime as dt

from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from ..jobs.control.purge import jobs_purge, purge_candidates, purgeable_projects
from ..jobs.states import JOB_FINAL
from ..projects.permissions import project_visible_or_404
from ..rest.openapi import ErrorOut
from .job_rows import job_row_counts


class JobPurgeIn(serializers.Serializer):
    older_than_days = serializers.FloatField(min_value=0, max_value=36_500, help_text=(
        "Jobs that finished (or, never started, were created) more than this many days ago; 0.5 is 12 hours."))
    project = serializers.CharField(required=False, help_text="Only this project's jobs (default: every project you may purge).")
    statuses = serializers.ListField(child=serializers.ChoiceField(choices=sorted(JOB_FINAL)), required=False,
                                     allow_empty=False, help_text="Only jobs that ended so (default: completed, failed and stopped).")
    dry_run = serializers.BooleanField(default=False, help_text="Say what would be deleted, delete nothing.")
    limit = serializers.IntegerField(min_value=1, max_value=5000, default=500, help_text="At most this many jobs, oldest first.")


class PurgedJobOut(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    project = serializers.CharField()
    status = serializers.CharField()
    finished_at = serializers.DateTimeField(allow_null=True)
    deleted = serializers.BooleanField(help_text="False on a dry run, or when its files could not be deleted.")
    nodes = serializers.IntegerField()
    events = serializers.IntegerField()
    checkpoints = serializers.IntegerField(help_text="Checkpoint records (the files are in stored_files).")
    artifacts = serializers.IntegerField(help_text="Artifact records (the files are in stored_files).")
    stored_files = serializers.IntegerField(help_text="Files of the job in the store: checkpoints and artifacts.")
    stored_bytes = serializers.IntegerField()
    error = serializers.CharField(allow_null=True)


class PurgeTotalsOut(serializers.Serializer):
    jobs = serializers.IntegerField()
    nodes = serializers.IntegerField()
    events = serializers.IntegerField()
    checkpoints = serializers.IntegerField()
    artifacts = serializers.IntegerField()
    stored_files = serializers.IntegerField()
    stored_bytes = serializers.IntegerField()


class JobPurgeOut(serializers.Serializer):
    dry_run = serializers.BooleanField()
    cutoff = serializers.DateTimeField(help_text="Jobs that ended before this.")
    jobs = PurgedJobOut(many=True)
    totals = PurgeTotalsOut(help_text="Over the jobs deleted (on a dry run: that would be).")
    remaining = serializers.IntegerField(help_text="Jobs that matched beyond `limit`: purge again.")


class JobPurgeView(APIView):
    """Delete finished jobs older than an age with their nodes, events, checkpoints and artifacts,
    files in the store included (the Rust coordinator's `POST /jobs/purge`). Staff, or a project's admin for
    that project's jobs; `dry_run` answers the same without deleting anything."""

    @extend_schema(request=JobPurgeIn, responses={200: JobPurgeOut, 404: OpenApiResponse(
        ErrorOut, description="A project that does not exist, or that this user may not see.")})
    def post(self, request):
        data = JobPurgeIn(data=request.data)
        data.is_valid(raise_exception=True)
        options = data.validated_data
        project = project_visible_or_404(request.user, options["project"]) if options.get("project") else None
        cutoff = timezone.now() - dt.timedelta(days=options["older_than_days"])
        matched = purge_candidates(projects=purgeable_projects(request.user, project), cutoff=cutoff,
                                   statuses=options.get("statuses"))
        jobs = list(matched[:options["limit"]])
        counts = job_row_counts([job.pk for job in jobs])  # before they go
        results = jobs_purge(jobs=jobs, dry_run=options["dry_run"])
        rows = [{
            "id": r.job_id, "name": r.job.name, "project": r.job.project.name, "status": r.job.status,
            "finished_at": r.job.finished_at, "deleted": r.deleted, **counts[r.job_id],
            "stored_files": r.stored_files, "stored_bytes": r.stored_bytes, "error": r.error,
        } for r in results]
        counted = [row for row in rows if row["deleted"] or (options["dry_run"] and not row["error"])]
        totals = {"jobs": len(counted), **{key: sum(row[key] for row in counted) for key in
                                           ("nodes", "events", "checkpoints", "artifacts", "stored_files", "stored_bytes")}}
        return Response(JobPurgeOut({
            "dry_run": options["dry_run"], "cutoff": cutoff, "jobs": rows, "totals": totals,
            "remaining": max(0, matched.count() - len(jobs)) if options["dry_run"] else matched.count(),
        }).data)
