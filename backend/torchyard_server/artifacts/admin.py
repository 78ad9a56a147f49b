from django.contrib import admin

from .models import Artifact, FunctionResult


@admin.register(Artifact)
class ArtifactAdmin(admin.ModelAdmin):
    list_display = ["id", "job", "attempt", "node_rank", "path", "size", "created_at"]
    search_fields = ["path"]
    raw_id_fields = ["job"]


@admin.register(FunctionResult)
class FunctionResultAdmin(admin.ModelAdmin):
    list_display = ["id", "job", "attempt", "rank", "machine_name", "ok", "error_type", "size", "created_at"]
    list_filter = ["ok"]
    raw_id_fields = ["job"]
