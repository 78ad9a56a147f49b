"""API tokens in the admin: staff see and revoke anyone's; a token is made only through the API
(it is shown once, to its owner)."""

from django.contrib import admin

from .models import ApiToken


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ("name", "user", "prefix", "created", "expiry", "last_used")
    list_filter = ("user",)
    search_fields = ("name", "user__username")
    fields = ("name", "user", "created", "expiry", "last_used")
    readonly_fields = ("user", "created", "expiry", "last_used")

    def has_add_permission(self, request) -> bool:
        return False
