"""Checking a JobSpec's shape and admitting it are two steps: JobSpecSerializer reads no database and
knows no user; control/admission.py checks what the spec names against the world and its submitter
(project, priority ceiling, bundles), then seals its secrets. A refusal is SpecRefused, keyed by field,
answered 400 by the API's one exception handler."""

from __future__ import annotations

import pytest
from rest_framework.exceptions import PermissionDenied
from torchyard_server.jobs.control.admission import admit_spec
from torchyard_server.jobs.errors import SpecRefused
from torchyard_server.jobs.intake.serializer import JobSpecSerializer
from torchyard_server.projects.models import Project

pytestmark = pytest.mark.django_db

SPEC = {"name": "j", "entrypoint": "examples/mlp_ddp.py", "distributed": {"backend": "gloo"}}
UNKNOWN_BUNDLE = "ab" * 32


def checked(**changes) -> dict:
    serializer = JobSpecSerializer(data={**SPEC, **changes})
    assert serializer.is_valid(), serializer.errors
    return serializer.validated_data


def test_the_shape_check_reads_no_database_whatever_the_spec_names(django_assert_num_queries):
    with django_assert_num_queries(0):
        data = checked(project="nobody-has-this", priority=100, secret_env={"API_KEY": "s3cret"},
                       code={"bundle": UNKNOWN_BUNDLE}, entrypoint="train.py")
    # Sealing is admission's: the checked value still holds what was given.
    assert data["secret_env"] == {"API_KEY": "s3cret"}


def test_admission_refuses_what_the_submitter_may_not_use_keyed_by_field(owner, teammate, viewer, outsider):
    with pytest.raises(SpecRefused) as refused:
        admit_spec(checked(project="nobody-has-this"), user=owner)
    assert list(refused.value.errors) == ["project"]
    with pytest.raises(SpecRefused) as refused:
        admit_spec(checked(), user=outsider)  # the default project, not one of carol's
    assert list(refused.value.errors) == ["project"]
    with pytest.raises(PermissionDenied):
        admit_spec(checked(), user=viewer)
    Project.objects.filter(name="default").update(priority_ceiling=0)
    with pytest.raises(SpecRefused) as refused:
        admit_spec(checked(priority=10), user=teammate)
    assert "ceiling" in refused.value.errors["priority"][0]
    with pytest.raises(SpecRefused) as refused:
        admit_spec(checked(code={"bundle": UNKNOWN_BUNDLE}, entrypoint="train.py"), user=owner, under="job_data")
    assert "no such bundle" in refused.value.errors["job_data"]["code"]["bundle"][0]


def test_admission_seals_the_secrets(owner):
    admitted = admit_spec(checked(secret_env={"API_KEY": "s3cret"}), user=owner)
    assert set(admitted["secret_env"]) == {"API_KEY"} and admitted["secret_env"]["API_KEY"] != "s3cret"


def test_the_api_answers_a_refusal_400_keyed_by_field(api):
    response = api.post("/api/jobs", {**SPEC, "code": {"bundle": UNKNOWN_BUNDLE}, "entrypoint": "train.py"},
                        format="json")
    assert response.status_code == 400
    assert "no such bundle" in response.json()["code"]["bundle"][0]
