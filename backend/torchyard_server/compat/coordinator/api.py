"""`POST /jobs` as the Rust coordinator's API takes it: `{"world_size": N}` (and its coordinator's
settings, lower case; the server's JOB_ID, WORLD_SIZE, CHECKPOINT_EVERY ... are the defaults) starts a
job of its demo worker (examples/seed001_worker.py) on N processes, which the planner spreads over
the machines that fit (a JobSpec's `resources.workers`), restarted after 500 ms and then an
exponential backoff, as the coordinator restarts its workers.

The seed's API is FastAPI's: a body it cannot take answers 422 with FastAPI's error shape,
`{"detail": [{"type", "loc", "msg", "input"}]}`, an unknown field included (`extra_forbidden`),
so a seed client's error handling keeps working. Every other answer is the canonical API's.
"""

from __future__ import annotations

from typing import Any, NotRequired, Required, TypedDict

from django.conf import settings
from rest_framework import serializers, status
from rest_framework.exceptions import ParseError
from rest_framework.response import Response
from rest_framework.settings import api_settings

from ...accounts.local_peer import LocalPeerAuthentication
from ...jobs.api.serializers import JobDetailOut
from ...jobs.api.views import JobListView
from ...jobs.control.admission import admit_spec
from ...jobs.control.submit import job_submit
from ...jobs.errors import SpecRefused
from ...jobs.intake.serializer import JobSpecSerializer
from ...jobs.selectors import job_get
from ...jobs.spec.jobspec import JobSpec

WORKER = "examples/seed001_worker.py"
DEFAULT_CHECKPOINT_EVERY = 5  # the coordinator's CHECKPOINT_EVERY
RESTART_DELAY = 0.5  # the coordinator's first wait before a restart, then doubling
DEFAULT_NAME = "demo-worker"  # a body without job_id, on a server without JOB_ID: the job runs the demo worker
# Credentials as on every route; then, in embedded mode, the server's own OS user over loopback.
AUTHENTICATION = [*api_settings.DEFAULT_AUTHENTICATION_CLASSES, LocalPeerAuthentication]


class Seed001JobIn(serializers.Serializer):
    """The Rust coordinator's job: its world size and its coordinator's settings (JOB_ID, CHECKPOINT_EVERY,
    SLEEP_SEC, DATASET_DIR, HEARTBEAT_TIMEOUT, MAX_RESTARTS) in lower case; the server's
    environment variables of those names are the defaults."""

    world_size = serializers.IntegerField(min_value=1, max_value=4096, help_text="training processes")
    job_id = serializers.CharField(max_length=200, required=False, help_text="the job's name")
    checkpoint_every = serializers.IntegerField(min_value=0, max_value=1_000_000, required=False,
                                                help_text="steps between checkpoints (0: none)")
    sleep_sec = serializers.FloatField(min_value=0, max_value=3600, required=False, help_text="pause per step")
    dataset_dir = serializers.CharField(max_length=4096, required=False, allow_blank=True,
                                        help_text="shard files on every machine, or s3://bucket/prefix")
    heartbeat_timeout = serializers.FloatField(required=False, help_text="fault_tolerance.heartbeat_timeout")
    max_restarts = serializers.IntegerField(required=False, help_text="fault_tolerance.max_restarts")
    project = serializers.CharField(max_length=63, required=False, help_text="Torchyard's: the job's project")


# Where a JobSpec's field came from in the seed's body, for its errors.
SPEC_FIELDS = {
    ("name",): "job_id", ("project",): "project", ("resources", "workers"): "world_size",
    ("checkpointing", "every_n_steps"): "checkpoint_every",
    ("fault_tolerance", "heartbeat_timeout"): "heartbeat_timeout",
    ("fault_tolerance", "max_restarts"): "max_restarts",
}
# DRF's error codes as pydantic's error types.
ERROR_TYPES = {"required": "missing", "null": "missing", "min_value": "greater_than_equal",
               "max_value": "less_than_equal", "max_length": "string_too_long", "blank": "string_too_short"}
PARSING = {serializers.IntegerField: "int_parsing", serializers.FloatField: "float_parsing",
           serializers.CharField: "string_type"}


class Seed001Body(TypedDict, total=False):
    """A body Seed001JobIn validated: its fields as the Rust coordinator names them."""

    world_size: Required[int]
    job_id: str
    checkpoint_every: int
    sleep_sec: float
    dataset_dir: str
    heartbeat_timeout: float
    max_restarts: int
    project: str


class SeedResources(TypedDict):
    workers: int  # the world size, spread by the planner


class SeedCheckpointing(TypedDict, total=False):
    enabled: bool
    every_n_steps: int


class SeedFaultTolerance(TypedDict, total=False):
    restart_delay: float
    heartbeat_timeout: float
    max_restarts: int


class SeedJobSpec(TypedDict):
    """The JobSpec a seed body makes, before the JobSpec serializer checks it like any other."""

    name: str
    entrypoint: str
    resources: SeedResources
    checkpointing: SeedCheckpointing
    fault_tolerance: SeedFaultTolerance
    env: dict[str, str]
    project: NotRequired[str]


def job_spec(body: Seed001Body) -> SeedJobSpec:
    """The JobSpec of a validated body of the Rust coordinator (its fields over the server's SEED001_DEFAULTS)."""
    values = {**settings.SEED001_DEFAULTS, **body}
    every = int(values.get("checkpoint_every", DEFAULT_CHECKPOINT_EVERY))
    env = {"CHECKPOINT_EVERY": str(every)}
    if "sleep_sec" in values:
        env["SLEEP_SEC"] = repr(float(values["sleep_sec"]))
    if values.get("dataset_dir"):
        env["DATASET_DIR"] = str(values["dataset_dir"])
    fault_tolerance: SeedFaultTolerance = {"restart_delay": RESTART_DELAY}
    if "heartbeat_timeout" in values:
        fault_tolerance["heartbeat_timeout"] = values["heartbeat_timeout"]
    if "max_restarts" in values:
        fault_tolerance["max_restarts"] = values["max_restarts"]
    checkpointing: SeedCheckpointing = {"enabled": every > 0}
    if every > 0:
        checkpointing["every_n_steps"] = every
    spec: SeedJobSpec = {
        "name": values.get("job_id") or DEFAULT_NAME,
        "entrypoint": WORKER,
        "resources": {"workers": values["world_size"]},
        "checkpointing": checkpointing,
        "fault_tolerance": fault_tolerance,
        "env": env,
    }
    if values.get("project"):
        spec["project"] = values["project"]
    return spec


class FastApiError(TypedDict):
    """An item of a FastAPI 422's `detail`."""

    type: str  # pydantic's error type: "missing", "int_parsing", "extra_forbidden", ...
    loc: list[str | int]  # ["body", field, ...]
    msg: str
    input: Any  # the value refused, as the body gave it


def _error(kind: str, loc: list[str | int], msg: str, value: Any) -> FastApiError:
    return {"type": kind, "loc": ["body", *loc], "msg": msg, "input": value}


def _flatten(errors: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    """DRF's nested errors as (field path, ErrorDetail) pairs."""
    if isinstance(errors, dict):
        return [pair for key, value in errors.items() for pair in _flatten(value, (*path, str(key)))]
    if isinstance(errors, list):
        return [pair for value in errors for pair in _flatten(value, path)]
    return [(path, errors)]


def fastapi_errors(errors: Any, data: dict[str, Any], *, spec: bool = False) -> list[FastApiError]:
    """DRF's validation errors of the seed body (or, with `spec`, of the JobSpec made from it) as
    FastAPI's items, each located at the body field it came from."""
    out = []
    fields = Seed001JobIn().fields
    for path, detail in _flatten(errors):
        field = SPEC_FIELDS.get(path, path[0] if path and not spec else None)
        loc: list[str | int] = [field] if field else list(path)
        code = getattr(detail, "code", "invalid")
        kind = ERROR_TYPES.get(code) or (PARSING.get(type(fields[field])) if field in fields and code == "invalid" else None)
        out.append(_error(kind or "value_error", loc, "Field required" if code == "required" else str(detail),
                          data.get(field) if field else None))
    return out


def unprocessable(detail: list[FastApiError]) -> Response:
    return Response({"detail": detail}, status=status.HTTP_422_UNPROCESSABLE_ENTITY)


class Seed001JobsView(JobListView):
    """`GET /jobs`: the canonical job list. `POST /jobs`: the Rust coordinator's body (see the module)."""

    authentication_classes = AUTHENTICATION

    def post(self, request):
        try:
            data = request.data
        except ParseError as exc:
            return unprocessable([_error("json_invalid", [], str(exc.detail), None)])
        if not isinstance(data, dict):
            return unprocessable([_error("model_attributes_type", [], "Input should be a valid dictionary or object "
                                         "to extract fields from", data)])
        if "world_size" not in data and "world_size" in settings.SEED001_DEFAULTS:  # the server's WORLD_SIZE
            data = {**data, "world_size": settings.SEED001_DEFAULTS["world_size"]}
        known = Seed001JobIn().fields
        extra = [_error("extra_forbidden", [key], "Extra inputs are not permitted", value)
                 for key, value in data.items() if key not in known]
        body = Seed001JobIn(data=data)
        invalid = [] if body.is_valid() else fastapi_errors(body.errors, data)
        if extra or invalid:
            return unprocessable(invalid + extra)
        spec = JobSpecSerializer(data=job_spec(body.validated_data))
        if not spec.is_valid():
            return unprocessable(fastapi_errors(spec.errors, data, spec=True))
        try:
            admitted = admit_spec(spec.validated_data, user=request.user)
        except SpecRefused as exc:
            return unprocessable(fastapi_errors(exc.errors, data, spec=True))
        job = job_submit(spec=JobSpec.from_json(admitted), owner=request.user)
        return Response({"job_id": job.pk, **JobDetailOut(job_get(job_id=job.pk)).data}, status=status.HTTP_201_CREATED)
