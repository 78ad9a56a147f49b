"""TransformerLab's DistributedPreferences, saved per user on the server (`GET/PUT
/api/preferences/distributed`): the defaults until a first save, then exactly what was saved; bad
input refused field by field; each user reads and writes only their own."""

from __future__ import annotations

import pytest
from clients import signed_in
from torchyard_server.machines.services import machine_delete
from torchyard_server.preferences.models import DistributedPreferences

pytestmark = pytest.mark.django_db
URL = "/api/preferences/distributed"
FIELDS = {"preferred_machines", "preferred_machine_names", "default_num_machines", "default_procs_per_machine",
          "default_gpus_per_machine", "auto_machine_selection", "updated_at"}


def saved(**changes):
    return {"preferred_machines": [], "default_num_machines": 2, "default_procs_per_machine": 1,
            "default_gpus_per_machine": 0, "auto_machine_selection": True, **changes}


def test_a_user_who_never_saved_gets_the_defaults(api):
    response = api.get(URL)
    assert response.status_code == 200
    body = response.json()
    assert set(body) == FIELDS
    assert body == {"preferred_machines": [], "preferred_machine_names": [], "default_num_machines": 2,
                    "default_procs_per_machine": 1, "default_gpus_per_machine": 0,
                    "auto_machine_selection": True, "updated_at": None}
    assert not DistributedPreferences.objects.exists()  # reading saves nothing


def test_a_save_is_read_back_field_by_field_machines_in_order(api, two_machines):
    a, b = two_machines
    put = api.put(URL, saved(preferred_machines=[b.pk, a.pk], default_num_machines=4, default_procs_per_machine=8,
                             default_gpus_per_machine=8, auto_machine_selection=False), format="json")
    assert put.status_code == 200
    body = api.get(URL).json()
    assert body == put.json()
    assert set(body) == FIELDS
    assert body["preferred_machines"] == [b.pk, a.pk]
    assert body["preferred_machine_names"] == ["gpu-b", "gpu-a"]
    assert body["default_num_machines"] == 4
    assert body["default_procs_per_machine"] == 8
    assert body["default_gpus_per_machine"] == 8
    assert body["auto_machine_selection"] is False
    assert isinstance(body["updated_at"], str)


def test_a_save_replaces_the_whole_of_the_last_one(api, two_machines):
    a, b = two_machines
    api.put(URL, saved(preferred_machines=[a.pk, b.pk], auto_machine_selection=False), format="json")
    again = api.put(URL, saved(preferred_machines=[b.pk], default_num_machines=1), format="json")
    assert again.status_code == 200
    body = api.get(URL).json()
    assert body["preferred_machines"] == [b.pk] and body["preferred_machine_names"] == ["gpu-b"]
    assert body["default_num_machines"] == 1 and body["auto_machine_selection"] is True
    assert DistributedPreferences.objects.count() == 1


def test_a_removed_machine_leaves_everyones_preferences(api, two_machines):
    a, b = two_machines
    api.put(URL, saved(preferred_machines=[a.pk, b.pk]), format="json")
    machine_delete(machine=a)
    assert api.get(URL).json()["preferred_machines"] == [b.pk]


@pytest.mark.parametrize(("changes", "field"), [
    ({"default_num_machines": 0}, "default_num_machines"),
    ({"default_num_machines": 257}, "default_num_machines"),
    ({"default_num_machines": "two"}, "default_num_machines"),
    ({"default_procs_per_machine": 0}, "default_procs_per_machine"),
    ({"default_procs_per_machine": 65}, "default_procs_per_machine"),
    ({"default_gpus_per_machine": -1}, "default_gpus_per_machine"),
    ({"default_gpus_per_machine": 65}, "default_gpus_per_machine"),
    ({"auto_machine_selection": "sometimes"}, "auto_machine_selection"),
    ({"auto_machine_selection": None}, "auto_machine_selection"),
    ({"preferred_machines": "gpu-a"}, "preferred_machines"),
    ({"preferred_machines": ["gpu-a"]}, "preferred_machines"),
    ({"preferred_machines": [0]}, "preferred_machines"),
])
def test_bad_values_are_refused_field_by_field_and_nothing_is_saved(api, two_machines, changes, field):
    response = api.put(URL, saved(**changes), format="json")
    assert response.status_code == 400
    assert set(response.json()) == {field}
    assert isinstance(response.json()[field], (list, dict))
    assert not DistributedPreferences.objects.exists()


@pytest.mark.parametrize("missing", ["default_num_machines", "default_procs_per_machine", "default_gpus_per_machine",
                                     "auto_machine_selection"])
def test_a_save_names_every_default(api, missing):
    body = saved()
    del body[missing]
    response = api.put(URL, body, format="json")
    assert response.status_code == 400 and set(response.json()) == {missing}


def test_unknown_and_repeated_machines_are_refused_by_id(api, two_machines):
    a, _ = two_machines
    unknown = api.put(URL, saved(preferred_machines=[a.pk, 987654]), format="json")
    assert unknown.status_code == 400
    assert unknown.json() == {"preferred_machines": ["no such machine: 987654."]}
    twice = api.put(URL, saved(preferred_machines=[a.pk, a.pk]), format="json")
    assert twice.status_code == 400
    assert twice.json() == {"preferred_machines": [f"{a.pk} is listed twice."]}
    assert not DistributedPreferences.objects.exists()


def test_the_preferred_machines_may_be_left_out(api):
    body = saved()
    del body["preferred_machines"]
    response = api.put(URL, body, format="json")
    assert response.status_code == 200 and response.json()["preferred_machines"] == []


def test_each_user_reads_and_writes_only_their_own(api, owner, teammate, two_machines):
    a, b = two_machines
    bob = signed_in(teammate)
    assert api.put(URL, saved(preferred_machines=[a.pk], default_num_machines=8), format="json").status_code == 200
    # Bob still has the defaults, whoever saved before him; his save leaves alice's alone.
    assert bob.get(URL).json()["updated_at"] is None
    assert bob.put(URL, saved(preferred_machines=[b.pk], default_num_machines=3), format="json").status_code == 200
    mine, his = api.get(URL).json(), bob.get(URL).json()
    assert (mine["preferred_machines"], mine["default_num_machines"]) == ([a.pk], 8)
    assert (his["preferred_machines"], his["default_num_machines"]) == ([b.pk], 3)
    # Nothing in a request chooses whose preferences: a `user` in the body is not a field.
    bob.put(URL, {**saved(default_num_machines=5), "user": owner.pk}, format="json")
    assert api.get(URL).json()["default_num_machines"] == 8
    assert DistributedPreferences.objects.get(user=owner).default_num_machines == 8
    assert DistributedPreferences.objects.get(user=teammate).default_num_machines == 5


def test_nobody_signed_in_is_refused(anonymous):
    assert anonymous.get(URL).status_code == 401
    assert anonymous.put(URL, saved(), format="json").status_code == 401
