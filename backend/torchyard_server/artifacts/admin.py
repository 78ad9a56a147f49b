from django.contrib import admin

from .models import Artifact


@admin.register(Artifact)
class ArtifactAdmin(admin.ModelAdmin):
    list_display = ["id", "job", "attempt", "node_rank", "path", "size", "created_at"]
    search_fields = ["path"]
    raw_id_fields = ["job"]
