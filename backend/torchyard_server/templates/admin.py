from django.contrib import admin

from .models import JobTemplate


@admin.register(JobTemplate)
class JobTemplateAdmin(admin.ModelAdmin):
    list_display = ["id", "name", "project", "owner", "updated_at"]
    list_filter = ["project"]
    search_fields = ["name"]
    readonly_fields = ["created_at", "updated_at", "jobs"]
