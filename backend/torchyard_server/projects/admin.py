from django.contrib import admin

from .models import Membership, Project
from .services import project_update


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 1
    autocomplete_fields = ["user"]


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = ["name", "description", "priority_ceiling", "max_gpus", "max_processes", "borrow", "created_at"]
    search_fields = ["name"]
    inlines = [MembershipInline]
    fieldsets = [
        (None, {"fields": ["name", "description"]}),
        ("Sharing the cluster", {"fields": ["priority_ceiling", "max_gpus", "max_processes", "borrow"],
                                 "description": "Priorities from -100 to 100 (low -10, normal 0, high 10). Quotas: "
                                                "what the project's running jobs may hold at once; empty: no limit."}),
    ]

    def save_model(self, request, obj, form, change):
        if not change:
            return super().save_model(request, obj, form, change)
        # Through the service, so a quota changed here is audited like one changed by the API.
        changed = [name for name in form.changed_data if name != "name"]
        if "name" in form.changed_data:
            Project.objects.filter(pk=obj.pk).update(name=obj.name)
        return project_update(project=obj, changes={name: form.cleaned_data[name] for name in changed})


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["project", "user", "role", "created_at"]
    list_filter = ["role", "project"]
    search_fields = ["project__name", "user__username"]
    autocomplete_fields = ["project", "user"]
