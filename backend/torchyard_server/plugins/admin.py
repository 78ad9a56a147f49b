from django.contrib import admin

from .models import Plugin


@admin.register(Plugin)
class PluginAdmin(admin.ModelAdmin):
    list_display = ["name", "version", "project", "owner", "entrypoint", "created_at"]
    list_filter = ["project"]
    search_fields = ["name", "description"]
    raw_id_fields = ["bundle"]
