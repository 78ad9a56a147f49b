"""Users' saved distributed-training defaults in the admin: staff may read and correct them."""

from django.contrib import admin

from .models import DistributedPreferences, PreferredMachine


class PreferredMachineInline(admin.TabularInline):
    model = PreferredMachine
    extra = 0
    ordering = ["position"]


@admin.register(DistributedPreferences)
class DistributedPreferencesAdmin(admin.ModelAdmin):
    list_display = ["user", "default_num_machines", "default_procs_per_machine", "default_gpus_per_machine",
                    "auto_machine_selection", "updated_at"]
    list_filter = ["auto_machine_selection"]
    search_fields = ["user__username"]
    readonly_fields = ["updated_at"]
    inlines = [PreferredMachineInline]
