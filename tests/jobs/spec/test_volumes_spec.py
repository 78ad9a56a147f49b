"""JobSpec `volumes` and `checkpointing.store: volume:NAME`: what is accepted, what is refused
field by field (DESIGN.md section 12)."""

from __future__ import annotations

import pytest
from torchyard_server.jobs.intake.serializer import JobSpecSerializer

pytestmark = pytest.mark.django_db

BASE = {"name": "v", "entrypoint": "examples/mlp_ddp.py"}


def validate(**changes):
    serializer = JobSpecSerializer(data={**BASE, **changes})
    return serializer.is_valid(), (serializer.validated_data if serializer.is_valid() else serializer.errors)


def test_a_volume_gets_its_name_as_mount_path_and_is_shared_by_default():
    ok, spec = validate(volumes=[{"name": "shared-data"}, {"name": "scratch", "mount_path": "/mnt/scratch/",
                                                          "access_mode": "ReadWriteOnce"}])
    assert ok, spec
    assert spec["volumes"] == [
        {"name": "shared-data", "mount_path": "shared-data", "access_mode": "ReadWriteMany"},
        {"name": "scratch", "mount_path": "/mnt/scratch", "access_mode": "ReadWriteOnce"},
    ]


def test_a_spec_without_volumes_stores_none():
    ok, spec = validate()
    assert ok and "volumes" not in spec


@pytest.mark.parametrize(("volumes", "field_error"), [
    ([{"name": "Shared"}], "name"),
    ([{"name": "-x"}], "name"),
    ([{"name": "a" * 64}], "name"),
    ([{"name": "x", "mount_path": "../up"}], "mount_path"),
    ([{"name": "x", "mount_path": "."}], "mount_path"),
    ([{"name": "x", "access_mode": "ReadOnlyMany"}], "access_mode"),
])
def test_it_refuses_a_bad_volume_field_by_field(volumes, field_error):
    ok, errors = validate(volumes=volumes)
    assert not ok
    assert field_error in errors["volumes"][0]


def test_it_refuses_a_volume_named_twice_and_more_than_sixteen():
    ok, errors = validate(volumes=[{"name": "a"}, {"name": "a", "mount_path": "b"}])
    assert not ok and "given twice" in str(errors["volumes"])
    ok, errors = validate(volumes=[{"name": "a", "mount_path": "same"}, {"name": "b", "mount_path": "same"}])
    assert not ok and "mount_path same given twice" in str(errors["volumes"])
    ok, errors = validate(volumes=[{"name": f"v{i}"} for i in range(17)])
    assert not ok and "volumes" in errors


def test_checkpoints_may_go_to_a_volume_of_the_job_only():
    ok, spec = validate(volumes=[{"name": "ckpt"}], checkpointing={"store": "volume:ckpt"})
    assert ok and spec["checkpointing"]["store"] == "volume:ckpt"
    ok, errors = validate(checkpointing={"store": "volume:ckpt"})
    assert not ok and "not a volume of the job" in str(errors["checkpointing"]["store"])
    ok, errors = validate(checkpointing={"store": "nfs"})
    assert not ok and "store" in errors["checkpointing"]


def test_the_api_answers_a_bad_volume_with_a_400(api):
    response = api.post("/api/jobs/plan", {**BASE, "volumes": [{"name": "BAD"}]}, format="json")
    assert response.status_code == 400
    assert "lowercase letters" in response.json()["volumes"]["0"]["name"][0]
