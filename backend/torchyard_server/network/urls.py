"""Seed 000's TransformerLab routes, as aliases over the same services as the canonical API."""

from django.urls import path

from ..machines import api as machines
from . import api as network

urlpatterns = [
    path("api/network/machines", machines.MachineListView.as_view()),
    path("api/network/machines/by-name/<str:name>", network.NetworkMachineByNameView.as_view()),
    path("api/network/machines/<int:machine_id>", network.NetworkMachineView.as_view()),
    path("api/network/machines/<int:machine_id>/ping", network.NetworkPingView.as_view()),
    path("api/network/machines/<int:machine_id>/dispatch_job", network.DispatchToMachineView.as_view()),
    path("api/network/status", network.NetworkStatusView.as_view()),
    path("api/network/health-check", network.NetworkHealthCheckView.as_view()),
    path("api/network/capabilities", network.NetworkCapabilitiesView.as_view()),
    path("api/network/distributed/plan", network.DistributedPlanView.as_view()),
    path("api/network/distributed/dispatch", network.DistributedDispatchView.as_view()),
    path("api/network/distributed/status/<int:job_id>", network.DistributedStatusView.as_view()),
    path("api/network/distributed/stop/<int:job_id>", network.DistributedStopView.as_view()),
    path("api/network/prepare_dependencies", network.PrepareDependenciesView.as_view()),
    path("api/network/local_job_output/<int:job_id>", network.LocalJobOutputView.as_view()),
    path("api/network/local_job_file/<int:job_id>/<path:key>", network.LocalJobFileView.as_view()),
    path("api/tasks/distributed/suggest_machines", network.SuggestMachinesView.as_view()),
]
