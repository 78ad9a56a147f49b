"""The API's ...Out serializers of the job's values are made from the values (jobs/shapes.py): each
value has one, showing its fields in its order and none of its bookkeeping, so the schema (and the
dashboard's generated types) cannot lag behind what is stored."""

from __future__ import annotations

import pytest
from rest_framework import serializers
from torchyard_server.jobs.api import serializers as out
from torchyard_server.jobs.spec import jobspec, plan, progress
from torchyard_server.jobs.spec.shapes import out_serializer, serializer_of
from torchyard_server.jobs.spec.stored import StoredValue, declared_fields

VALUES = [obj for module in (jobspec, plan, progress) for obj in vars(module).values()
          if isinstance(obj, type) and issubclass(obj, StoredValue) and obj is not StoredValue]


@pytest.mark.parametrize("value", VALUES, ids=[v.__name__ for v in VALUES])
def test_every_value_is_shown_by_a_serializer_made_from_it_in_its_order(value):
    shown = list(serializer_of(value)().fields)
    assert shown == [f.name for f in declared_fields(value) if f.name not in value.INTERNAL]


def test_the_servers_bookkeeping_is_never_shown():
    assert "after_preemption" not in out.PlanOut().fields
    assert {"step_by_rank", "rate_anchor", "samples_by_rank"}.isdisjoint(out.JobProgressOut().fields)


def test_an_optional_key_is_left_out_and_a_reported_number_that_is_not_one_is_null():
    stored = {"world_size": 1, "nnodes": 1, "procs_per_node": 1, "master_addr": "h1", "master_port": 29500,
              "backend": "gloo", "nodes": [], "hyperparameters": {}, "warnings": []}
    shown = out.PlanOut(stored).data
    assert set(shown) == set(stored)
    assert out.PlanOut.Meta.optional_fields == ("launcher", "spares", "nodes_range", "preflight", "skipped")
    reported = out.JobProgressOut({"step": 3, "loss": "nan", "lr": float("inf")}).data
    assert (reported["step"], reported["loss"], reported["lr"], reported["throughput_by_rank"]) == (3, None, None, {})
    assert out.JobProgressOut.Meta.optional_fields == ()  # every key is written, null when absent


def test_a_shape_given_for_no_field_of_the_value_is_refused():
    with pytest.raises(TypeError, match="no fields"):
        out_serializer(plan.PlanSpare, "PlanSpareTypoOut", shapes={"machine": serializers.Serializer})
