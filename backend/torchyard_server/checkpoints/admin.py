from django.contrib import admin

from .models import CheckpointManifest


@admin.register(CheckpointManifest)
class CheckpointManifestAdmin(admin.ModelAdmin):
    list_display = ["id", "job", "step", "attempt", "world_size", "total_bytes", "verified", "deleted", "committed_at"]
    list_filter = ["verified", "deleted"]
    search_fields = ["uri"]
    raw_id_fields = ["job"]
