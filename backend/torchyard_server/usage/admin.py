from django.contrib import admin

from .models import JobGoodput, NodeUsage


class ReadOnlyAdmin(admin.ModelAdmin):
    """The ledgers are written by the control plane, never by hand."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(NodeUsage)
class NodeUsageAdmin(ReadOnlyAdmin):
    """Written by node transitions."""

    list_display = ["job_id", "node_id", "project_name", "username", "machine_name", "gpus", "processes",
                    "started_at", "ended_at", "gpu_seconds"]
    list_filter = ["project_name"]
    search_fields = ["project_name", "username", "machine_name"]


@admin.register(JobGoodput)
class JobGoodputAdmin(ReadOnlyAdmin):
    """Written once a job has ended (reports/goodput_ledger.py)."""

    list_display = ["job_id", "job_name", "project_name", "username", "finished_at", "wall_seconds", "goodput"]
    list_filter = ["project_name"]
    search_fields = ["job_name", "project_name", "username"]

    @admin.display(description="goodput")
    def goodput(self, obj: JobGoodput) -> str:
        training = float((obj.parts or {}).get("training", 0.0))
        return f"{100 * training / obj.wall_seconds:.1f}%" if obj.wall_seconds else "-"
