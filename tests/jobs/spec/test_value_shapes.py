"""The job's typed values (jobs/jobspec.py, plan.py, progress.py) and the ...Out serializers that give
the API's schema their shapes declare the same fields: a field added to one and not the other fails
here, so the schema (and the dashboard's generated types) never lag behind what is stored."""

from __future__ import annotations

import dataclasses

import pytest
from torchyard_server.jobs import jobspec, plan, progress
from torchyard_server.jobs import serializers as out
from torchyard_server.jobs.stored import StoredValue

PAIRS = [
    (jobspec.JobSpec, out.JobSpecOut), (jobspec.Code, out.JobCodeOut), (jobspec.Runtime, out.JobRuntimeOut),
    (jobspec.Resources, out.JobResourcesOut), (jobspec.Placement, out.JobPlacementOut),
    (jobspec.Distributed, out.JobDistributedOut), (jobspec.Scaling, out.JobScalingOut),
    (jobspec.Checkpointing, out.JobCheckpointingOut), (jobspec.FaultTolerance, out.JobFaultToleranceOut),
    (jobspec.Compression, out.JobCompressionOut), (jobspec.Function, out.JobFunctionOut),
    (jobspec.Preemption, out.JobPreemptionOut), (jobspec.Volume, out.JobVolumeOut), (jobspec.Elastic, out.JobElasticOut),
    (plan.Plan, out.PlanOut), (plan.PlanNode, out.PlanNodeOut), (plan.PlanSpare, out.PlanSpareOut),
    (plan.PlanVolume, out.PlanVolumeOut), (progress.JobProgress, out.JobProgressOut),
]  # fmt: skip


def declared(value: type[StoredValue]) -> set[str]:
    own = {f.name for f in dataclasses.fields(StoredValue)}
    return {f.name for f in dataclasses.fields(value)} - own - value.INTERNAL


@pytest.mark.parametrize(("value", "serializer"), PAIRS, ids=[v.__name__ for v, _ in PAIRS])
def test_a_value_and_its_out_serializer_declare_the_same_fields(value, serializer):
    shown = set(serializer().fields)
    assert declared(value) - shown == set(), f"{value.__name__} holds fields {serializer.__name__} does not show"
    assert shown - declared(value) == set(), f"{serializer.__name__} shows fields {value.__name__} does not hold"


def test_every_section_of_the_jobspec_is_paired():
    sections = {obj for obj in vars(jobspec).values()
                if isinstance(obj, type) and issubclass(obj, StoredValue) and obj is not StoredValue}
    assert sections - {v for v, _ in PAIRS} == set()
