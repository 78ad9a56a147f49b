"""JobSpec validation under Hypothesis: whatever JSON a client sends (any shape, or a valid spec with
a few parts changed), validation either accepts it, in its canonical shape, and the database then
stores it and the API shows it, or refuses it with messages keyed by the path of each field that
was wrong. It never raises anything else (that would be a 500)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rest_framework.exceptions import PermissionDenied
from rest_framework.renderers import JSONRenderer
from rest_framework.test import APIRequestFactory
from torchyard.sdk.scaling import adjust_hyperparameters
from torchyard_server.jobs.api.serializers import JobDetailOut
from torchyard_server.jobs.control.admission import admit_spec
from torchyard_server.jobs.errors import SpecRefused
from torchyard_server.jobs.intake.serializer import JobSpecSerializer
from torchyard_server.jobs.models import Job
from torchyard_server.jobs.spec.jobspec import JobSpec

pytestmark = pytest.mark.django_db

VALID = {
    "name": "mnist-ddp-demo", "entrypoint": "examples/mlp_ddp.py", "args": ["--epochs", "2"], "env": {"FOO": "bar"},
    "resources": {"nodes": 2, "procs_per_node": 2, "gpus_per_node": 0, "min_gpu_memory": 0},
    "placement": {"policy": "pack", "machines": []}, "distributed": {"backend": "auto", "launcher": "torchrun"},
    "hyperparameters": {"batch_size": 64, "lr": 0.001, "epochs": 2}, "scaling": {"mode": "keep_global_batch"},
    "checkpointing": {"enabled": True, "every_n_steps": 200, "store": "default", "keep": 3},
    "fault_tolerance": {"max_restarts": 3, "heartbeat_timeout": 10, "on_stall": "report"},
    "compression": {"enabled": False, "hook": "fp16"}, "project": "default", "secret_env": {"API_KEY": "s3cret"},
}
# Other valid values of the fields that have a few, so mutations also combine valid choices.
CHOICES = {
    "mode": ["keep_global_batch", "scale_global_batch", "none"], "lr_rule": ["linear", "sqrt"],
    "backend": ["auto", "gloo", "nccl"], "policy": ["pack", "spread"], "store": ["default", "local", "s3"],
    "on_stall": ["report", "recover"], "hook": ["fp16", "bf16", "powersgd"], "model": ["mlp", "char_gpt"],
    "workers": [1, 3, 4], "gpus_per_node": [0, 1, 2], "procs_per_node": [1, 3], "batch_size": [1, 63, 64.0],
    "lr": ["1e-3", "inf", 1e308, [0.1]],
}
SECTIONS = ("resources", "placement", "distributed", "scaling", "checkpointing", "fault_tolerance", "compression", "runtime")
FIELD_NAMES = sorted(set(JobSpecSerializer().fields) | {key for section in VALID.values() if isinstance(section, dict) for key in section})

# JSON as a client may send it: any nesting of objects, arrays, strings, numbers, booleans and null.
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=30) | st.just("\x00"),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=12,
)
# Keys that validation knows (so nested sections are reached) as well as any others.
keys = st.sampled_from(FIELD_NAMES) | st.text(max_size=12)
json_objects = st.dictionaries(keys, json_values | st.dictionaries(keys, json_values, max_size=5), max_size=10)


MISSING = object()
# Hyperparameters are the user's own: numbers, numbers as text, anything.
hyperparameters = st.dictionaries(
    st.sampled_from(["batch_size", "lr", "learning_rate", "epochs", "warmup_steps"]) | keys,
    st.integers(-5, 300) | st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from(["1e-3", "inf", "nan", "\x00"])
    | json_values,
    max_size=4,
)


def near(valid: Any, key: str = "") -> st.SearchStrategy:
    """A field as a client may get it slightly wrong: mostly the valid value, often another valid
    choice of the field, now and then left out or any JSON; a section field by field."""
    if key == "hyperparameters":
        right = hyperparameters
    elif isinstance(valid, dict):
        right = st.fixed_dictionaries({k: near(v, k) for k, v in valid.items()}).map(
            lambda section: {k: v for k, v in section.items() if v is not MISSING})
    else:
        right = st.just(valid)
    choices = CHOICES.get(key, [])

    ways = {"right": right, "choice": st.sampled_from(choices) if choices else right,
            "missing": st.just(MISSING), "any": json_values}
    # In about these proportions (valid first: Hypothesis draws early entries more often).
    return st.sampled_from(["right"] * 64 + ["choice"] * 30 + ["missing"] * 3 + ["any"] * 3).flatmap(ways.__getitem__)


# The distributed adjustments (DESIGN.md section 7) over any hyperparameters and world size.
scaled_specs = st.fixed_dictionaries({
    "scaling": st.fixed_dictionaries({"mode": st.sampled_from(CHOICES["mode"])},
                                     optional={"lr_rule": st.sampled_from(CHOICES["lr_rule"]),
                                               "warmup_steps": st.integers(-1, 10) | json_values}),
    "hyperparameters": hyperparameters,
    "resources": st.fixed_dictionaries({"nodes": st.integers(1, 4), "procs_per_node": st.integers(1, 4)}),
}).map(lambda parts: VALID | parts)

near_valid_specs = st.builds(
    lambda spec, extra: spec | extra,
    st.fixed_dictionaries({k: near(v, k) for k, v in VALID.items()}).map(
        lambda spec: {k: v for k, v in spec.items() if v is not MISSING}),
    st.dictionaries(keys, json_values, max_size=1) | st.just({}) | st.just({}),
)


@pytest.fixture
def request_of_member(django_user_model):
    user = django_user_model.objects.create_user("mia")  # a member of the default project
    request = APIRequestFactory().post("/api/jobs")
    request.user = user
    return request


def _messages_only(errors: Any) -> bool:
    """Every leaf of an error body is a message (a string), under field names, or positions in a list."""
    if isinstance(errors, str):
        return bool(errors)
    if isinstance(errors, list):
        return bool(errors) and all(_messages_only(e) for e in errors)
    if isinstance(errors, dict):
        return bool(errors) and all(isinstance(k, (str, int)) and _messages_only(v) for k, v in errors.items())
    return False


def check(spec: Any, request) -> None:
    serializer = JobSpecSerializer(data=spec)
    if serializer.is_valid():
        try:
            data = admit_spec(serializer.validated_data, user=request.user)
        except PermissionDenied:  # a project the submitter may only view: a 403, not a field error
            return
        except SpecRefused as exc:  # a project, bundle or priority this submitter may not use
            assert _messages_only(exc.errors) and set(exc.errors) <= set(serializer.fields), exc.errors
            return
        assert all(isinstance(data[section], dict) for section in SECTIONS)
        spec_value = JobSpec.from_json(data)
        assert spec_value.to_json() == data  # the typed value holds every key the validation wrote
        assert spec_value.world_size >= 1
        assert all(value != VALID["secret_env"]["API_KEY"] for value in (data.get("secret_env") or {}).values())
        # What validation accepts, the plan shows, the database stores and the API shows (strict
        # JSON: no NaN, no infinity).
        JSONRenderer().render(adjust_hyperparameters(data["hyperparameters"], data["scaling"], spec_value.world_size))
        with transaction.atomic():
            job = Job.objects.create(name=data["name"], spec=data, owner=request.user)
            JSONRenderer().render(JobDetailOut(job).data)
            transaction.set_rollback(True)
    else:
        errors = serializer.errors
        assert _messages_only(errors), errors
        # Top-level errors name a field of the request, or the request as a whole.
        named = set(spec) if isinstance(spec, dict) else set()
        assert set(errors) <= named | set(serializer.fields) | {"non_field_errors"}, errors


def test_the_sample_spec_is_valid(request_of_member):
    serializer = JobSpecSerializer(data=VALID)
    assert serializer.is_valid(), serializer.errors
    admit_spec(serializer.validated_data, user=request_of_member.user)


@settings(max_examples=200, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spec=json_objects | json_values)
def test_any_json_is_accepted_or_refused_field_by_field(request_of_member, spec):
    check(spec, request_of_member)


@settings(max_examples=200, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spec=near_valid_specs)
def test_a_spec_near_a_valid_one_is_accepted_or_refused_field_by_field(request_of_member, spec):
    check(spec, request_of_member)


@settings(max_examples=150, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spec=scaled_specs)
def test_any_hyperparameters_under_any_scaling_are_accepted_or_refused_field_by_field(request_of_member, spec):
    check(spec, request_of_member)
