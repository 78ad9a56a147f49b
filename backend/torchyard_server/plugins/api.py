"""`/api/plugins`: the plugins a job can run by name (TransformerLab's plugin_name): the built-in recipes
and the registered ones, and registering one (`torchyard plugin push DIR` calls it);
`/api/plugins/<project>/<name>`: one registered plugin, and removing it (`torchyard plugin rm`)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.exceptions import NotFound
from rest_framework.response import Response
from rest_framework.views import APIView

from ..rest.openapi import ValidationErrorOut
from .selectors import plugin_catalog, plugin_row, plugins_visible_to
from .serializers import PluginIn, PluginOut
from .services import plugin_delete, plugin_register


class PluginListView(APIView):
    @extend_schema(responses=PluginOut(many=True),
                   parameters=[OpenApiParameter("project", str, description="only this project's registered plugins")])
    def get(self, request):
        return Response(PluginOut(plugin_catalog(request.user, project=request.query_params.get("project")), many=True).data)

    @extend_schema(request=PluginIn, responses={201: PluginOut, 200: PluginOut, 400: ValidationErrorOut})
    def post(self, request):
        """Register a plugin whose directory was uploaded as a bundle; 200 when it replaced the
        plugin of that name in the project (a new version)."""
        body = PluginIn(data=request.data, context={"request": request})
        body.is_valid(raise_exception=True)
        plugin, created = plugin_register(data=body.validated_data, owner=request.user)
        return Response(PluginOut(plugin_row(plugin)).data, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)


class PluginDetailView(APIView):
    def _plugin(self, request, project: str, name: str):
        # A plugin of a project the user is not in is not found, as a job of one is.
        plugin = plugins_visible_to(request.user).filter(project__name=project, name=name).first()
        if plugin is None:
            raise NotFound(f"no plugin {name!r} in a project {project!r} that you belong to.")
        return plugin

    @extend_schema(responses=PluginOut)
    def get(self, request, project: str, name: str):
        return Response(PluginOut(plugin_row(self._plugin(request, project, name))).data)

    @extend_schema(responses={204: None})
    def delete(self, request, project: str, name: str):
        """Remove the plugin: its owner or an admin of its project. Jobs that ran it are unchanged."""
        plugin_delete(plugin=self._plugin(request, project, name), user=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)
