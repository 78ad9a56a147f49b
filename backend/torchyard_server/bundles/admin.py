from django.contrib import admin

from .models import Bundle


@admin.register(Bundle)
class BundleAdmin(admin.ModelAdmin):
    list_display = ["sha256", "size", "unpacked_size", "created_at"]
    search_fields = ["sha256"]
    filter_horizontal = ["owners"]
