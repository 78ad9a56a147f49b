from django.contrib import admin

from .models import NodeUsage


@admin.register(NodeUsage)
class NodeUsageAdmin(admin.ModelAdmin):
    """Read-only: the ledger is written by node transitions, never by hand."""

    list_display = ["job_id", "node_id", "project_name", "username", "machine_name", "gpus", "processes",
                    "started_at", "ended_at", "gpu_seconds"]
    list_filter = ["project_name"]
    search_fields = ["project_name", "username", "machine_name"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
