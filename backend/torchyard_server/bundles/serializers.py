from rest_framework import serializers

from .models import Bundle


class BundleOut(serializers.ModelSerializer):
    file_count = serializers.SerializerMethodField()

    class Meta:
        model = Bundle
        fields = ["sha256", "size", "unpacked_size", "file_count", "created_at"]

    def get_file_count(self, bundle: Bundle) -> int:
        return len(bundle.files)


class BundleDetailOut(BundleOut):
    class Meta(BundleOut.Meta):
        fields = [*BundleOut.Meta.fields, "files"]


class BundleLimitsOut(serializers.Serializer):
    max_bytes = serializers.IntegerField(help_text="The most bytes of files (and of archive) a bundle may hold.")
