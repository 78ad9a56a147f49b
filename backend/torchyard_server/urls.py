from django.contrib import admin
from django.urls import path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from .accounts import api as accounts
from .artifacts import api as artifacts
from .audit import api as audit
from .bundles import api as bundles
from .checkpoints import api as checkpoints
from .compat.coordinator import urls as coordinator_urls
from .compat.distroml import cluster
from .compat.transformerlab import urls as transformerlab_urls
from .experiments import api as experiments
from .jobs.api import agent as agent_api
from .jobs.api import policies as policies_api
from .jobs.api import queue as queue_api
from .jobs.api import ray_proxy
from .jobs.api import views as jobs
from .live import sse
from .machines import api as machines
from .plugins import api as plugins
from .preferences import api as preferences
from .projects import api as projects
from .reports import goodput_api, purge_api, summaries
from .streaming import api as streaming
from .sweeps import api as sweeps
from .usage import api as usage
from .web import health, metrics
from .web import views as web

api = [
    path("api/health", web.health),
    path("api/health/deep", health.DeepHealthView.as_view()),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema")),
    path("api/auth/csrf", accounts.CsrfView.as_view()),
    path("api/auth/login", accounts.LoginView.as_view()),
    path("api/auth/logout", accounts.LogoutView.as_view()),
    path("api/auth/me", accounts.MeView.as_view()),
    path("api/auth/token", accounts.TokenView.as_view()),
    path("api/auth/tokens", accounts.TokenListView.as_view()),
    path("api/auth/tokens/<int:token_id>", accounts.TokenDetailView.as_view()),
    path("api/audit", audit.AuditListView.as_view()),
    path("api/agent/config", machines.AgentConfigView.as_view()),
    path("api/agent/health", machines.AgentHealthView.as_view()),
    path("api/agent/bundles/<str:sha256>", agent_api.AgentBundleView.as_view()),
    path("api/bundles", bundles.BundleListView.as_view()),
    path("api/bundles/limits", bundles.BundleLimitsView.as_view()),
    path("api/bundles/<str:sha256>", bundles.BundleDetailView.as_view()),
    path("api/machines", machines.MachineListView.as_view()),
    path("api/machines/<int:machine_id>", machines.MachineDetailView.as_view()),
    path("api/machines/<int:machine_id>/rotate-token", machines.MachineRotateTokenView.as_view()),
    path("api/cluster/workers", cluster.ClusterWorkersView.as_view()),
    path("api/cluster/resources", cluster.ClusterResourcesView.as_view()),
    path("api/sweeps", sweeps.SweepListView.as_view()),
    path("api/sweeps/<int:sweep_id>", sweeps.SweepDetailView.as_view()),
    path("api/sweeps/<int:sweep_id>/stop", sweeps.SweepStopView.as_view()),
    path("api/sweeps/<int:sweep_id>/resume", sweeps.SweepResumeView.as_view()),
    path("api/experiments", experiments.RunListView.as_view()),
    path("api/experiments/compare", experiments.RunCompareView.as_view()),
    path("api/experiments/<str:run_id>", experiments.RunDetailView.as_view()),
    path("api/preferences/distributed", preferences.DistributedPreferencesView.as_view()),
    path("api/projects", projects.ProjectListView.as_view()),
    path("api/projects/<str:name>", projects.ProjectDetailView.as_view()),
    path("api/projects/<str:name>/members", projects.ProjectMembersView.as_view()),
    path("api/projects/<str:name>/members/<str:username>", projects.ProjectMemberView.as_view()),
    path("api/recipes", jobs.RecipeListView.as_view()),
    path("api/plugins", plugins.PluginListView.as_view()),
    path("api/plugins/<str:project>/<str:name>", plugins.PluginDetailView.as_view()),
    path("api/placement-policies", policies_api.PlacementPolicyListView.as_view()),
    path("api/jobs", jobs.JobListView.as_view()),
    path("api/queue", queue_api.QueueView.as_view()),
    path("api/usage", usage.UsageView.as_view()),
    path("api/usage/goodput", goodput_api.GoodputRollupView.as_view()),
    path("api/jobs/plan", jobs.JobPlanView.as_view()),
    path("api/jobs/summaries", summaries.JobSummariesView.as_view()),
    path("api/jobs/purge", purge_api.JobPurgeView.as_view()),
    path("api/jobs/<int:job_id>", jobs.JobDetailView.as_view()),
    path("api/jobs/<int:job_id>/stop", jobs.JobStopView.as_view()),
    path("api/jobs/<int:job_id>/stacks", jobs.JobStacksView.as_view()),
    path("api/jobs/<int:job_id>/summary", summaries.JobSummaryView.as_view()),
    path("api/jobs/<int:job_id>/goodput", goodput_api.JobGoodputView.as_view()),
    path("api/jobs/<int:job_id>/logs", streaming.JobLogsView.as_view()),
    path("api/jobs/<int:job_id>/logs/stream", sse.JobLogStreamView.as_view()),
    path("api/jobs/<int:job_id>/metrics", streaming.JobMetricsView.as_view()),
    path("api/jobs/<int:job_id>/events", streaming.JobEventsView.as_view()),
    path("api/jobs/<int:job_id>/checkpoints", checkpoints.JobCheckpointsView.as_view()),
    path("api/jobs/<int:job_id>/artifacts", artifacts.JobArtifactsView.as_view()),
    path("api/jobs/<int:job_id>/artifacts/archive", artifacts.JobArtifactArchiveView.as_view()),
    path("api/jobs/<int:job_id>/artifacts/<int:artifact_id>", artifacts.JobArtifactFileView.as_view()),
    path("api/jobs/<int:job_id>/results", artifacts.JobResultsView.as_view()),
    path("api/jobs/<int:job_id>/ray/", ray_proxy.JobRayDashboardView.as_view()),
    path("api/jobs/<int:job_id>/ray/<path:path>", ray_proxy.JobRayDashboardView.as_view()),
    path("api/jobs/<int:job_id>/results/<int:rank>", artifacts.JobResultFileView.as_view()),
    path("api/jobs/<int:job_id>/checkpoints/<int:checkpoint_id>", checkpoints.JobCheckpointManifestView.as_view()),
    path("api/jobs/<int:job_id>/checkpoints/<int:checkpoint_id>/files/<path:path>", checkpoints.JobCheckpointFileView.as_view()),
]

# JSON for /api/ paths no route matches (web/errors.py).
handler404 = "torchyard_server.web.errors.not_found"

urlpatterns = [
    *api,
    # TransformerLab's routes, as aliases over the same services.
    *transformerlab_urls.urlpatterns,
    # The Rust coordinator's routes at its root paths (/health, /jobs, ...), before the dashboard's catch-all.
    *coordinator_urls.urlpatterns,
    path("admin/", admin.site.urls),
    # Prometheus scrapes it (bearer token or a staff user: web/metrics.py).
    path("metrics", metrics.MetricsView.as_view()),
    re_path(r"^assets/(?P<path>.+)$", web.asset),
    # Everything else that is not /api is a dashboard route.
    re_path(r"^(?!api/|admin/|static/)(?P<path>.*)$", web.spa),
]
