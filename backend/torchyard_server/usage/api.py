"""`GET /api/usage`: GPU- and process-hours per project, user or machine, for a window, with series
for charts. Everyone signed in sees the usage of the projects they belong to (staff: all)."""

from __future__ import annotations

import datetime as dt
import re

from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from ..projects.permissions import visible_project_ids
from .selectors import BUCKETS, GROUPS, MAX_BUCKETS, bucket_count, usage_report

DEFAULT_WINDOW = dt.timedelta(days=7)
RELATIVE = re.compile(r"^(\d{1,6})([mhdw])$")
UNIT_SECONDS = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


class UsageTotalOut(serializers.Serializer):
    key = serializers.CharField(help_text="the project's, user's or machine's name")
    gpu_seconds = serializers.FloatField()
    gpu_hours = serializers.FloatField()
    process_seconds = serializers.FloatField()
    process_hours = serializers.FloatField()
    nodes = serializers.IntegerField(help_text="nodes that ran in the window")


class UsageSeriesOut(serializers.Serializer):
    key = serializers.CharField()
    gpu_hours = serializers.ListField(child=serializers.FloatField(), help_text="one per bucket, aligned with `buckets`")
    process_hours = serializers.ListField(child=serializers.FloatField())


class UsageOut(serializers.Serializer):
    by = serializers.ChoiceField(choices=list(GROUPS))
    since = serializers.DateTimeField()
    until = serializers.DateTimeField()
    bucket = serializers.ChoiceField(choices=list(BUCKETS), allow_null=True)
    totals = UsageTotalOut(many=True, help_text="most GPU-hours first")
    buckets = serializers.ListField(child=serializers.DateTimeField(), required=False,
                                    help_text="with ?bucket=: each bucket's start (UTC hours or days)")
    series = UsageSeriesOut(many=True, required=False, help_text="with ?bucket=: one per key, in the totals' order")

    class Meta:
        optional_fields = ("buckets", "series")


def moment(raw: str | None, name: str, default: dt.datetime, now: dt.datetime) -> dt.datetime:
    """An ISO date-time (UTC unless it says), a date (its midnight, UTC), or an age: 90m, 24h, 7d, 2w."""
    if not raw:
        return default
    relative = RELATIVE.match(raw.strip())
    if relative:
        try:
            return now - dt.timedelta(seconds=int(relative[1]) * UNIT_SECONDS[relative[2]])
        except OverflowError:  # 999999w: before the year 1
            raise ValidationError({name: ["an age that reaches back before the year 1."]}) from None
    try:
        parsed = parse_datetime(raw)
        if parsed is None and (day := parse_date(raw)) is not None:
            parsed = dt.datetime.combine(day, dt.time(), tzinfo=dt.UTC)
    except ValueError:
        parsed = None
    if parsed is None:
        raise ValidationError({name: ["an ISO date-time (2025-06-01T12:00:00Z), a date (2025-06-01) or an age "
                                      "(90m, 24h, 7d, 2w)."]})
    return parsed if timezone.is_aware(parsed) else parsed.replace(tzinfo=dt.UTC)


class UsageView(APIView):
    @extend_schema(responses=UsageOut, parameters=[
        OpenApiParameter("by", str, enum=list(GROUPS), description="group by project (default), user or machine"),
        OpenApiParameter("since", str, description="start: ISO date-time, date, or an age such as 7d (default 7d)"),
        OpenApiParameter("until", str, description="end: ISO date-time, date, or an age (default now)"),
        OpenApiParameter("bucket", str, enum=list(BUCKETS), description="also a series per key, by hour or day"),
        OpenApiParameter("project", str, description="only this project's usage"),
    ])
    def get(self, request):
        params = request.query_params
        by = params.get("by") or "project"
        if by not in GROUPS:
            raise ValidationError({"by": [f"one of {', '.join(GROUPS)}."]})
        bucket = params.get("bucket") or None
        if bucket is not None and bucket not in BUCKETS:
            raise ValidationError({"bucket": [f"one of {', '.join(BUCKETS)}."]})
        now = timezone.now()
        until = moment(params.get("until"), "until", now, now)
        since = moment(params.get("since"), "since", until - DEFAULT_WINDOW, now)
        if since >= until:
            raise ValidationError({"since": ["must be before until."]})
        if bucket and bucket_count(since, until, bucket) > MAX_BUCKETS:
            raise ValidationError({"bucket": [f"at most {MAX_BUCKETS} buckets: a shorter window or bucket=day."]})
        report = usage_report(by=by, since=since, until=until, bucket=bucket,
                              project_ids=visible_project_ids(request.user), project=params.get("project") or None,
                              now=now)
        return Response(UsageOut(report).data)
