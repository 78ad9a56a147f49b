from django.contrib import admin

from .models import Machine
from .services import machine_clear_suspect


@admin.register(Machine)
class MachineAdmin(admin.ModelAdmin):
    list_display = ["name", "host", "port", "status", "cpus", "gpus", "agent_version", "last_heartbeat", "suspect_until"]
    list_filter = ["status"]
    search_fields = ["name", "host"]
    readonly_fields = ["capabilities", "current_load", "agent_version", "last_heartbeat", "created_at", "updated_at",
                       "suspect_until", "suspect_reason"]
    actions = ["clear_suspect"]

    @admin.display(description="CPUs")
    def cpus(self, obj):
        return obj.capabilities.get("cpu_count")

    @admin.display(description="GPUs")
    def gpus(self, obj):
        return obj.capabilities.get("gpu_count")

    @admin.action(description="Clear the suspicion (plan on the machines again)")
    def clear_suspect(self, request, queryset):
        for machine in queryset.exclude(suspect_until=None):
            machine_clear_suspect(machine=machine)
