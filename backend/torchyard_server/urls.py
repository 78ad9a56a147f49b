from django.contrib import admin
from django.urls import path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from .accounts import api as accounts
from .artifacts import api as artifacts
from .bundles import api as bundles
from .checkpoints import api as checkpoints
from .jobs import agent_api
from .jobs import api as jobs
from .jobs import network_api as network
from .machines import api as machines
from .streaming import api as streaming
from .web import views as web

api = [
    path("api/health", web.health),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema")),
    path("api/auth/csrf", accounts.CsrfView.as_view()),
    path("api/auth/login", accounts.LoginView.as_view()),
    path("api/auth/logout", accounts.LogoutView.as_view()),
    path("api/auth/me", accounts.MeView.as_view()),
    path("api/auth/token", accounts.TokenView.as_view()),
    path("api/agent/config", machines.AgentConfigView.as_view()),
    path("api/agent/bundles/<str:sha256>", agent_api.AgentBundleView.as_view()),
    path("api/bundles", bundles.BundleListView.as_view()),
    path("api/bundles/limits", bundles.BundleLimitsView.as_view()),
    path("api/bundles/<str:sha256>", bundles.BundleDetailView.as_view()),
    path("api/machines", machines.MachineListView.as_view()),
    path("api/machines/<int:machine_id>", machines.MachineDetailView.as_view()),
    path("api/recipes", jobs.RecipeListView.as_view()),
    path("api/jobs", jobs.JobListView.as_view()),
    path("api/jobs/plan", jobs.JobPlanView.as_view()),
    path("api/jobs/<int:job_id>", jobs.JobDetailView.as_view()),
    path("api/jobs/<int:job_id>/stop", jobs.JobStopView.as_view()),
    path("api/jobs/<int:job_id>/summary", checkpoints.JobSummaryView.as_view()),
    path("api/jobs/<int:job_id>/logs", streaming.JobLogsView.as_view()),
    path("api/jobs/<int:job_id>/metrics", streaming.JobMetricsView.as_view()),
    path("api/jobs/<int:job_id>/events", streaming.JobEventsView.as_view()),
    path("api/jobs/<int:job_id>/checkpoints", checkpoints.JobCheckpointsView.as_view()),
    path("api/jobs/<int:job_id>/artifacts", artifacts.JobArtifactsView.as_view()),
    path("api/jobs/<int:job_id>/artifacts/archive", artifacts.JobArtifactArchiveView.as_view()),
    path("api/jobs/<int:job_id>/artifacts/<int:artifact_id>", artifacts.JobArtifactFileView.as_view()),
    path("api/jobs/<int:job_id>/checkpoints/<int:checkpoint_id>", checkpoints.JobCheckpointManifestView.as_view()),
    path("api/jobs/<int:job_id>/checkpoints/<int:checkpoint_id>/files/<path:path>", checkpoints.JobCheckpointFileView.as_view()),
]

# Seed 000's TransformerLab routes, as aliases over the same services.
network_aliases = [
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
    path("api/network/local_job_output/<int:job_id>", artifacts.LocalJobOutputView.as_view()),
    path("api/network/local_job_file/<int:job_id>/<path:key>", artifacts.LocalJobFileView.as_view()),
    path("api/tasks/distributed/suggest_machines", network.SuggestMachinesView.as_view()),
]

urlpatterns = [
    *api,
    *network_aliases,
    path("admin/", admin.site.urls),
    re_path(r"^assets/(?P<path>.+)$", web.asset),
    # Everything else that is not /api is a dashboard route.
    re_path(r"^(?!api/|admin/|static/)(?P<path>.*)$", web.spa),
]
