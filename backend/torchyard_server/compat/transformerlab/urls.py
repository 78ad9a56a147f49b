"""TransformerLab's routes, as aliases over the same services as the canonical API."""

from django.urls import path

from ...machines import api as machines
from . import api as network
from . import tasks_api as tasks

urlpatterns = [
    path("api/network/machines", machines.MachineListView.as_view()),
    path("api/network/machines/by-name/<str:name>", network.NetworkMachineByNameView.as_view()),
    path("api/network/machines/<int:machine_id>", network.NetworkMachineView.as_view()),
    path("api/network/machines/<int:machine_id>/ping", network.NetworkPingView.as_view()),
    path("api/network/machines/<int:machine_id>/dispatch_job", network.DispatchToMachineView.as_view()),
    # Every route with a {job_id} takes the same job ids (ids.py): Torchyard's (digits), a plan's (plan-12),
    # or the name the user gave a job of theirs, whole or rank by rank (dist_job_123).
    path("api/network/machines/<int:machine_id>/job_status/<str:job_id>", network.MachineJobStatusView.as_view()),
    path("api/network/machines/<int:machine_id>/stop_job/<str:job_id>", network.MachineStopJobView.as_view()),
    path("api/network/status", network.NetworkStatusView.as_view()),
    path("api/network/health-check", network.NetworkHealthCheckView.as_view()),
    path("api/network/capabilities", network.NetworkCapabilitiesView.as_view()),
    # TransformerLab spells its first section's routes distributed_jobs/..., its route list distributed/...
    path("api/network/distributed/plan", network.DistributedPlanView.as_view()),
    path("api/network/distributed/dispatch", network.DistributedDispatchView.as_view()),
    path("api/network/distributed/status/<str:job_id>", network.DistributedStatusView.as_view()),
    path("api/network/distributed/stop/<str:job_id>", network.DistributedStopView.as_view()),
    path("api/network/distributed_jobs/plan", network.DistributedPlanView.as_view()),
    path("api/network/distributed_jobs/dispatch", network.DistributedDispatchView.as_view()),
    path("api/network/distributed_jobs/<str:job_id>/status", network.DistributedStatusView.as_view()),
    path("api/network/execute_job", network.ExecuteJobView.as_view()),
    path("api/network/local_job_status/<str:job_id>", network.LocalJobStatusView.as_view()),
    path("api/network/prepare_dependencies", network.PrepareDependenciesView.as_view()),
    path("api/network/local_job_output/<str:job_id>", network.LocalJobOutputView.as_view()),
    path("api/network/local_job_file/<str:job_id>/<path:key>", network.LocalJobFileView.as_view()),
    # Before tasks/<int:task_id>: "distributed" is no task id (the int converter would not take it anyway).
    path("api/tasks/distributed/suggest_machines", network.SuggestMachinesView.as_view()),
    path("api/tasks", tasks.TaskListView.as_view()),
    path("api/tasks/<int:task_id>", tasks.TaskDetailView.as_view()),
    path("api/tasks/<int:task_id>/queue_distributed", tasks.TaskQueueDistributedView.as_view()),
    # A plan's job_id (plan-12) queues the plan: the id distributed/plan answered, echoed as it is.
    path("api/tasks/plan-<int:task_id>/queue_distributed", tasks.TaskQueueDistributedView.as_view()),
    path("api/tasks/<int:task_id>/queue/<int:machine_id>", tasks.TaskQueueOnMachineView.as_view()),
]
