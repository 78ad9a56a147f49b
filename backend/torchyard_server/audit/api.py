"""The audit log, for staff: read-only and newest first. Nothing edits or deletes an entry."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.generics import ListAPIView
from rest_framework.pagination import CursorPagination
from rest_framework.permissions import IsAdminUser

from .selectors import audit_entries
from .serializers import AuditEntryOut, AuditQuery


class AuditPage(CursorPagination):
    """A cursor, not an offset: entries keep arriving while someone pages back through them."""

    ordering = "-id"
    page_size = 100
    page_size_query_param = "limit"
    max_page_size = 1000


class AuditListView(ListAPIView):
    # Staff only, kept on this view whatever the API's default permission becomes.
    permission_classes = [IsAdminUser]
    serializer_class = AuditEntryOut
    pagination_class = AuditPage

    def get_queryset(self):
        query = AuditQuery(data=self.request.query_params)
        query.is_valid(raise_exception=True)
        return audit_entries(**query.validated_data)

    @extend_schema(parameters=[AuditQuery])
    def get(self, request, *args, **kwargs):
        """Who submitted, stopped, deleted, added, removed, drained or changed what, and when."""
        return super().get(request, *args, **kwargs)
