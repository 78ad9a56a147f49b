"""What each checkpoint's save cost the training loop (the SDK's manifest `save` section): stored from
the checkpoint event and served by GET /api/jobs/{id}/checkpoints, for async, sync and older saves."""

from __future__ import annotations

import pytest
from torchyard_server.checkpoints.services import checkpoint_record
from torchyard_server.jobs.models import Job

pytestmark = pytest.mark.django_db


def test_blocking_and_background_seconds_are_stored_and_served(api, owner):
    job = Job.objects.create(name="timed", spec={"checkpointing": {"keep": 5}}, owner=owner, world_size=1)
    saves = {
        10: {"async": True, "blocking_seconds": 0.041, "background_seconds": 2.5},
        20: {"async": False, "blocking_seconds": 3.0, "background_seconds": None},
        30: None,  # a manifest from before the SDK recorded it
        40: {"async": True, "blocking_seconds": -1, "background_seconds": "soon"},  # not numbers we keep
    }
    for step, save in saves.items():
        manifest = {"step": step, "files": [], **({"save": save} if save is not None else {})}
        checkpoint_record(event={"job": job.pk, "uri": f"file:///x/step-{step:08d}/manifest.json", "step": step,
                                 "manifest": manifest})
    listed = api.get(f"/api/jobs/{job.pk}/checkpoints").json()
    got = {c["step"]: (c["saved_async"], c["blocking_seconds"], c["background_seconds"]) for c in listed}
    assert got == {10: (True, 0.041, 2.5), 20: (False, 3.0, None), 30: (False, None, None), 40: (True, None, None)}
