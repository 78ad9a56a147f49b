from django.contrib import admin

from .models import Job, JobNode


class JobNodeInline(admin.TabularInline):
    model = JobNode
    extra = 0
    fields = ["attempt", "node_rank", "machine_name", "rank_start", "rank_end", "status", "exit_code", "last_heartbeat"]
    readonly_fields = fields
    can_delete = False


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = ["id", "name", "status", "priority", "borrowing", "world_size", "attempt", "owner", "created_at",
                    "finished_at"]
    list_filter = ["status", "owner", "borrowing"]
    search_fields = ["name", "status_reason"]
    # A priority changes through PATCH /api/jobs/{id} (ceiling checked, audited); borrowing is the queue's.
    readonly_fields = ["created_at", "started_at", "finished_at", "updated_at", "priority", "queued_at", "borrowing"]
    inlines = [JobNodeInline]


@admin.register(JobNode)
class JobNodeAdmin(admin.ModelAdmin):
    list_display = ["id", "job", "attempt", "node_rank", "machine_name", "status", "exit_code", "last_heartbeat"]
    list_filter = ["status", "machine_name"]
    search_fields = ["machine_name", "status_reason"]
