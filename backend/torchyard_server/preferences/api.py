"""`GET/PUT /api/preferences/distributed`: the signed-in user's own distributed-training defaults
(TransformerLab's DistributedPreferences); no route reads or writes anyone else's."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.response import Response
from rest_framework.utils.serializer_helpers import ReturnDict
from rest_framework.views import APIView

from .models import DistributedPreferences
from .serializers import DistributedPreferencesIn, DistributedPreferencesOut
from .services import distributed_preferences_of, distributed_preferences_set, preferred_machines_of


def _shown(preferences: DistributedPreferences) -> ReturnDict:
    machines = preferred_machines_of(preferences)
    return DistributedPreferencesOut({
        "preferred_machines": [machine_id for machine_id, _ in machines],
        "preferred_machine_names": [name for _, name in machines],
        "default_num_machines": preferences.default_num_machines,
        "default_procs_per_machine": preferences.default_procs_per_machine,
        "default_gpus_per_machine": preferences.default_gpus_per_machine,
        "auto_machine_selection": preferences.auto_machine_selection,
        "updated_at": preferences.updated_at,
    }).data


class DistributedPreferencesView(APIView):
    """The signed-in user's defaults for the New job form's distributed training section."""

    @extend_schema(responses=DistributedPreferencesOut)
    def get(self, request):
        return Response(_shown(distributed_preferences_of(request.user)))

    @extend_schema(request=DistributedPreferencesIn, responses=DistributedPreferencesOut)
    def put(self, request):
        data = DistributedPreferencesIn(data=request.data)
        data.is_valid(raise_exception=True)
        return Response(_shown(distributed_preferences_set(user=request.user, **data.validated_data)))
