"""Reads of the machine table."""

from __future__ import annotations

import json

from django.conf import settings
from django.db import connection
from django.db.models import QuerySet
from rest_framework.renderers import JSONRenderer

from .models import Machine
from .registries import machine_usage
from .serializers import MachineOut


def machine_list() -> QuerySet[Machine]:
    return Machine.objects.all().order_by("name")


def _iso(column: str) -> str:
    """A timestamp as DRF's DateTimeField writes it in UTC: microseconds only when there are
    some, `Z` for the offset (Python's isoformat, then DRF's `+00:00` -> `Z`)."""
    # The only '.' in the text is the fraction's.
    return f"""replace(to_char({column} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US'), '.000000', '') || 'Z'"""


# volumes.merged_volumes in SQL: the agent's reported volumes and the server's declared ones, by
# name (in code point order, as Python sorts), the agent's path winning where both name one.
_VOLUMES = """
    SELECT COALESCE(json_agg(json_build_object(
        'name', n.name,
        'path', CASE WHEN r.v IS NULL THEN d.path ELSE COALESCE(r.v ->> 'path', '') END,
        'source', CASE WHEN r.v IS NULL THEN 'server' ELSE 'agent' END,
        'exists', CASE WHEN r.v IS NULL THEN NULL ELSE COALESCE((r.v ->> 'exists')::boolean, false) END,
        'total_bytes', r.v -> 'total_bytes', 'free_bytes', r.v -> 'free_bytes',
        'storage_class', r.v -> 'storage_class'
    ) ORDER BY n.name COLLATE "C"), '[]'::json)
    FROM (
        SELECT key AS name FROM jsonb_each(m.volumes)
        UNION SELECT e ->> 'name' FROM jsonb_array_elements(COALESCE(m.capabilities -> 'volumes', '[]'::jsonb)) AS e
        WHERE COALESCE(e ->> 'name', '') <> ''
    ) AS n
    LEFT JOIN LATERAL (SELECT value #>> '{}' AS path FROM jsonb_each(m.volumes) WHERE key = n.name) AS d ON true
    LEFT JOIN LATERAL (
        SELECT e AS v FROM jsonb_array_elements(COALESCE(m.capabilities -> 'volumes', '[]'::jsonb)) AS e
        WHERE e ->> 'name' = n.name LIMIT 1
    ) AS r ON true"""


def machine_list_json() -> str:
    """Every machine, as MachineOut lists them, as one JSON text written by PostgreSQL: the list is
    read on every dashboard poll and sent to every cluster stream, a thousand machines at once, and
    reading the rows into Python (JSON columns parsed, model instances and timestamps built) and
    writing them out again took most of a second on a loaded controller. The JSON columns go out as
    they are stored, as MachineOut writes them. Elsewhere than PostgreSQL, or where DRF would not
    write timestamps in UTC, MachineOut writes the list. tests/machines/test_machine_list.py holds the
    two equal."""
    if connection.vendor != "postgresql" or settings.TIME_ZONE != "UTC" or not settings.USE_TZ:
        return JSONRenderer().render(MachineOut(machine_list(), many=True).data).decode()
    table = connection.ops.quote_name(Machine._meta.db_table)
    # json_build_object keeps MachineOut's field order; `usage` is a parameter of type json (not
    # jsonb), so its items keep their keys' order too.
    sql = f"""
        SELECT COALESCE(json_agg(json_build_object(
            'id', m.id, 'name', m.name, 'host', m.host, 'port', m.port, 'status', m.status,
            'drained', m.drained, 'capabilities', m.capabilities, 'current_load', m.current_load,
            'labels', m.labels, 'agent_version', m.agent_version,
            'last_heartbeat', {_iso("m.last_heartbeat")}, 'created_at', {_iso("m.created_at")},
            'usage', COALESCE(%s::json -> m.id::text, '[]'::json),
            'volumes', ({_VOLUMES}), 'declared_volumes', m.volumes,
            'quarantined_at', {_iso("m.quarantined_at")}, 'quarantine_reason', m.quarantine_reason,
            'quarantine_job', m.quarantine_job, 'probation_until', {_iso("m.probation_until")},
            'health', m.health, 'measured_links', m.measured_links,
            'price_per_gpu_hour', m.price_per_gpu_hour, 'price_per_machine_hour', m.price_per_machine_hour
        ) ORDER BY m.name), '[]'::json)::text
        FROM {table} AS m"""
    with connection.cursor() as cursor:
        cursor.execute(sql, [json.dumps(machine_usage())])
        return cursor.fetchone()[0]
