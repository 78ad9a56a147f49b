from django.urls import path

from .consumers import ClusterStreamConsumer, JobStreamConsumer

websocket_urlpatterns = [
    path("api/jobs/<int:job_id>/stream", JobStreamConsumer.as_asgi()),
    path("api/cluster/stream", ClusterStreamConsumer.as_asgi()),
]
