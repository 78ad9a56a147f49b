from django.contrib import admin

from .models import JobEvent


@admin.register(JobEvent)
class JobEventAdmin(admin.ModelAdmin):
    list_display = ["id", "job", "type", "attempt", "node_rank", "rank", "ts"]
    list_filter = ["type"]
    search_fields = ["job__name"]
    raw_id_fields = ["job", "node"]
