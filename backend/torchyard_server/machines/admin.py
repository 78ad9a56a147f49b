from django.contrib import admin

from .models import Machine
from .services import machine_release


@admin.register(Machine)
class MachineAdmin(admin.ModelAdmin):
    list_display = ["name", "host", "port", "status", "cpus", "gpus", "price_per_gpu_hour", "price_per_machine_hour",
                    "agent_version", "last_heartbeat", "quarantined_at"]
    # Prices are set here or with PATCH /api/machines/{id}; the goodput roll-ups cost nodes' time with them.
    list_editable = ["price_per_gpu_hour", "price_per_machine_hour"]
    list_filter = ["status"]
    search_fields = ["name", "host"]
    readonly_fields = ["capabilities", "current_load", "agent_version", "last_heartbeat", "created_at", "updated_at",
                       "quarantined_at", "quarantine_reason", "quarantine_job", "probation_until", "health"]
    actions = ["release"]

    @admin.display(description="CPUs")
    def cpus(self, obj):
        return obj.capabilities.get("cpu_count")

    @admin.display(description="GPUs")
    def gpus(self, obj):
        return obj.capabilities.get("gpu_count")

    @admin.action(description="Release from quarantine (plan on the machines again)")
    def release(self, request, queryset):
        for machine in queryset.exclude(quarantined_at=None):
            machine_release(machine=machine, actor=request, why="released in the admin")
