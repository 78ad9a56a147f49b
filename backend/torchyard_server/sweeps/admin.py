from django.contrib import admin

from .models import Sweep, Trial


class TrialInline(admin.TabularInline):
    model = Trial
    extra = 0
    fields = ("number", "status", "params", "value", "step", "job", "reason")
    readonly_fields = fields


@admin.register(Sweep)
class SweepAdmin(admin.ModelAdmin):
    list_display = ("id", "name", "project", "owner", "status", "created_at")
    list_filter = ("status",)
    search_fields = ("name",)
    inlines = [TrialInline]
