from django.contrib import admin

from .models import AuditEntry


@admin.register(AuditEntry)
class AuditEntryAdmin(admin.ModelAdmin):
    """Read-only, for every staff user (not only those granted the model's view permission)."""

    list_display = ["created", "actor_label", "action", "target_type", "target_label", "project", "source_ip"]
    list_filter = ["action", "target_type", "project", "created"]
    search_fields = ["actor_label", "target_label", "target_id"]
    date_hierarchy = "created"
    list_select_related = ["project"]

    def has_module_permission(self, request) -> bool:
        return request.user.is_active and request.user.is_staff

    def has_view_permission(self, request, obj=None) -> bool:
        return request.user.is_active and request.user.is_staff

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
