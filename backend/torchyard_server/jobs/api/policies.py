"""`GET /api/placement-policies`: what `placement.policy` accepts on this server, built-in and installed."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from ..placement.policies import policy_catalog


class PlacementPolicyOut(serializers.Serializer):
    name = serializers.CharField(help_text="what a JobSpec's placement.policy names")
    description = serializers.CharField()
    built_in = serializers.BooleanField(help_text="false: installed by the entry point group torchyard.placement_policies")


class PlacementPolicyListView(APIView):
    @extend_schema(responses=PlacementPolicyOut(many=True))
    def get(self, request):
        return Response(PlacementPolicyOut(policy_catalog(), many=True).data)
