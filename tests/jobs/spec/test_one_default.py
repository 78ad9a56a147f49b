"""A JobSpec field's default is declared once, on the typed value (jobs/spec/jobspec.py): the intake's
serializers take theirs from it. Wherever a section's serializer and its value both have a field, the
default a submission gets is the one a stored spec without the key reads back."""

from __future__ import annotations

import dataclasses

import pytest
from rest_framework import fields as drf_fields
from torchyard_server.jobs.intake import sections
from torchyard_server.jobs.intake.serializer import JobSpecSerializer
from torchyard_server.jobs.spec import jobspec

PAIRS = [
    (sections.ResourcesSerializer, jobspec.Resources), (sections.ElasticSerializer, jobspec.Elastic),
    (sections.PlacementSerializer, jobspec.Placement), (sections.DistributedSerializer, jobspec.Distributed),
    (sections.ScalingSerializer, jobspec.Scaling), (sections.VolumeSerializer, jobspec.Volume),
    (sections.CheckpointingSerializer, jobspec.Checkpointing), (sections.FaultToleranceSerializer, jobspec.FaultTolerance),
    (sections.CompressionSerializer, jobspec.Compression),
]


def _value_default(field: dataclasses.Field):
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return dataclasses.MISSING


@pytest.mark.parametrize("serializer, value", PAIRS, ids=[v.__name__ for _, v in PAIRS])
def test_a_serializer_default_is_its_values(serializer, value):
    declared = {f.name: f for f in dataclasses.fields(value)}
    compared = 0
    for name, field in serializer().fields.items():
        if field.default is drf_fields.empty or name not in declared:
            continue
        given = field.default() if callable(field.default) else field.default
        if name == "policy":  # the server's own default policy (settings), checked at start-up
            continue
        assert given == _value_default(declared[name]), f"{serializer.__name__}.{name}"
        compared += 1
    assert compared, f"{serializer.__name__} shares no default with {value.__name__}"


# The value's own bookkeeping (StoredValue): keys a stored spec had that this version does not know,
# and which keys were stored as null. Never submitted.
STORED_ONLY = {"extra", "stored_null"}


@pytest.mark.parametrize("serializer, value", PAIRS + [
    (sections.CodeSerializer, jobspec.Code), (sections.RuntimeSerializer, jobspec.Runtime),
    (JobSpecSerializer, jobspec.JobSpec)], ids=[v.__name__ for _, v in PAIRS] + ["Code", "Runtime", "JobSpec"])
def test_a_section_accepts_exactly_the_fields_its_value_holds(serializer, value):
    """One shape: a field the intake accepts and the typed value drops (or the other way round) is
    a submission silently changed on its way to the launch."""
    accepted = {name for name, field in serializer().fields.items() if not field.read_only}
    accepted |= set(getattr(serializer, "shown_only", ()))
    held = {field.name for field in dataclasses.fields(value)} - STORED_ONLY
    assert accepted == held, f"only accepted: {sorted(accepted - held)}; only held: {sorted(held - accepted)}"
