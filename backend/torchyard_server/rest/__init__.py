"""What the API views of every app share on top of Django REST framework: the OpenAPI schema's error
bodies (openapi), file download renderers (renderers), query parameter readers (params) and list
serializers that skip DRF's per-field machinery (listing). No models, no app imports."""
