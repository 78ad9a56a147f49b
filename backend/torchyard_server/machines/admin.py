from django.contrib import admin

from .models import Machine


@admin.register(Machine)
class MachineAdmin(admin.ModelAdmin):
    list_display = ["name", "host", "port", "status", "cpus", "gpus", "agent_version", "last_heartbeat"]
    list_filter = ["status"]
    search_fields = ["name", "host"]
    readonly_fields = ["capabilities", "current_load", "agent_version", "last_heartbeat", "created_at", "updated_at"]

    @admin.display(description="CPUs")
    def cpus(self, obj):
        return obj.capabilities.get("cpu_count")

    @admin.display(description="GPUs")
    def gpus(self, obj):
        return obj.capabilities.get("gpu_count")
