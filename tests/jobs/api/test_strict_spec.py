"""Nothing is accepted only to be ignored: a misspelt key anywhere in a JobSpec is a 400 at its path,
naming the field it most likely meant. The walk covers every section the serializer declares, so a
section added later is walked too."""

from __future__ import annotations

import pytest
from rest_framework import serializers
from torchyard_server.jobs.intake.serializer import JobSpecSerializer

pytestmark = pytest.mark.django_db

GOOD = {"name": "demo", "entrypoint": "examples/mlp_ddp.py", "resources": {"nodes": 2, "procs_per_node": 2}}


def misspelt(name: str) -> str:
    """The name with its last two letters swapped ("nodes" -> "nodse"), or doubled when short."""
    return name[:-2] + name[-1] + name[-2] if len(name) > 3 else name + name[-1]


def sections() -> list[tuple[str, str, serializers.Serializer]]:
    """(section, one of its writable fields, its serializer) for every nested section."""
    found = []
    for name, field in JobSpecSerializer().fields.items():
        nested = field.child if isinstance(field, serializers.ListSerializer) else field
        if isinstance(nested, serializers.Serializer):
            writable = sorted(n for n, f in nested.fields.items() if not f.read_only)
            found.append((name, writable[0], field))
    return found


def test_the_walk_reaches_every_section():
    assert {name for name, _, _ in sections()} >= {
        "code", "runtime", "resources", "placement", "distributed", "scaling", "checkpointing", "fault_tolerance",
        "compression", "elastic", "function", "volumes", "preemption"}


@pytest.mark.parametrize(("section", "field"), [(s, f) for s, f, _ in sections()])
def test_a_misspelt_key_in_any_section_is_refused_at_its_path_naming_the_field(api, section, field):
    wrong = misspelt(field)
    value: object = {wrong: 1}
    if isinstance(JobSpecSerializer().fields[section], serializers.ListSerializer):
        value = [value]
    response = api.post("/api/jobs/plan", {**GOOD, section: value}, format="json")
    assert response.status_code == 400, response.json()
    errors = response.json()[section]
    if isinstance(value, list):
        errors = errors["0"]  # a list's errors are keyed by the item's index
    assert errors.get(wrong) == [f"unknown field (did you mean {field}?)."], response.json()


def test_the_classic_typo_runs_on_no_node_and_a_top_level_one_is_named_too(api):
    response = api.post("/api/jobs", {**GOOD, "resources": {"nodez": 2}, "entrypiont": "x.py"}, format="json")
    assert response.status_code == 400
    assert response.json()["resources"] == {"nodez": ["unknown field (did you mean nodes?)."]}
    assert response.json()["entrypiont"] == ["unknown field (did you mean entrypoint?)."]
    far = api.post("/api/jobs", {**GOOD, "resources": {"nodes": 2, "colour": "blue"}}, format="json")
    assert far.json()["resources"] == {"colour": ["unknown field."]}


def test_a_spec_the_api_showed_can_be_sent_back_as_it_is(api, two_machines):
    created = api.post("/api/jobs", {**GOOD, "name": "shown"}, format="json")
    assert created.status_code == 201, created.json()
    shown = api.get(f"/api/jobs/{created.json()['id']}").json()["spec"]
    again = api.post("/api/jobs", {**shown, "name": "again"}, format="json")
    assert again.status_code == 201, again.json()
    assert again.json()["spec"] == {**shown, "name": "again"}


def test_a_bundles_size_the_api_shows_is_not_an_unknown_field(api):
    response = api.post("/api/jobs/plan", {**GOOD, "code": {"bundle": "0" * 64, "size": 1234}}, format="json")
    assert "size" not in str(response.json().get("code", "")), response.json()
