"""Torchyard settings: one module, every knob an environment variable (README lists them)."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import dj_database_url
from cryptography.fernet import Fernet
from torchyard.tls import secure_redis_url

from .env import ConfigError, coordinator_store_url, env_bool, env_float, env_int, env_list, env_str

BASE_DIR = Path(__file__).resolve().parent.parent  # backend/torchyard_server
REPO_ROOT = BASE_DIR.parent.parent

DATA_DIR = Path(env_str("TORCHYARD_DATA_DIR", str(Path.cwd() / "var"))).resolve()

DEBUG = env_bool("TORCHYARD_DEBUG", False)
# Embedded mode generates and keeps a key in the data dir; production passes SECRET_KEY(_FILE).
SECRET_KEY = env_str("SECRET_KEY") or env_str("TORCHYARD_SECRET_KEY") or "insecure-embedded-key-change-me"
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "knox",
    "axes",
    "drf_spectacular",
    "channels",
    "torchyard_server.audit",
    "torchyard_server.projects",
    "torchyard_server.accounts",
    "torchyard_server.machines",
    "torchyard_server.bundles",
    "torchyard_server.usage",
    "torchyard_server.jobs",
    "torchyard_server.preferences",
    "torchyard_server.templates",
    "torchyard_server.plugins",
    "torchyard_server.artifacts",
    "torchyard_server.checkpoints",
    "torchyard_server.streaming",
    "torchyard_server.live",
    "torchyard_server.sweeps",
    "torchyard_server.compat.transformerlab",
    "torchyard_server.web",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "torchyard_server.web.middleware.refuse_nul_characters",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "torchyard_server.audit.middleware.remember_request",
    # Last: turns a sign-in that django-axes refused into the lockout answer (accounts/lockout.py).
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "torchyard_server.urls"
ASGI_APPLICATION = "torchyard_server.asgi.application"
APPEND_SLASH = False

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database: SQLite under the data dir (embedded) or DATABASE_URL (PostgreSQL) -----------------
DATABASE_URL = env_str("DATABASE_URL", f"sqlite:///{DATA_DIR / 'torchyard.sqlite3'}")
DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=60)}
if DATABASES["default"]["ENGINE"].endswith("postgresql"):
    # A pool of connections per process rather than persistent ones: daphne runs each request on a
    # thread of its own, so a persistent connection served one request and was left open until
    # its thread was collected: a new PostgreSQL backend (a fork, cold caches) per request, dozens
    # open under a polling dashboard. The pool hands warm ones out and takes them back when
    # Django closes them (end of a request, of a task, of an ingest batch).
    DB_POOL_SIZE = env_int("TORCHYARD_DB_POOL_SIZE", 32)
    if DB_POOL_SIZE < 1:
        raise ConfigError(f"TORCHYARD_DB_POOL_SIZE={DB_POOL_SIZE} must be at least 1")
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": min(2, DB_POOL_SIZE), "max_size": DB_POOL_SIZE, "timeout": 30}
elif DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # Several processes write (web, controller, ingest): WAL + IMMEDIATE avoids "database is locked".
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"]["OPTIONS"] = {
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        "transaction_mode": "IMMEDIATE",
        "timeout": 30,
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Redis: Celery broker, channel layer, event stream -------------------------------------------
# A rediss:// URL gets ssl_cert_reqs=required unless it says otherwise: Celery's broker would
# otherwise skip verifying the server's certificate (torchyard/tls.py).
REDIS_URL = secure_redis_url(env_str("REDIS_URL", "redis://127.0.0.1:6379/0"))

CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {
            # redis-py's default socket_timeout drops idle WebSockets every ~5 s (FIELD-NOTES).
            "hosts": [{"address": REDIS_URL, "socket_timeout": None}],
            "capacity": 10_000,
            "expiry": 120,
            "prefix": "torchyard:ch",
        },
    }
}

CELERY_BROKER_URL = REDIS_URL
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_DEFAULT_QUEUE = "control"
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_BEAT_SCHEDULE = {
    "supervise": {"task": "torchyard_server.jobs.tasks.supervise", "schedule": env_float("TORCHYARD_SUPERVISE_EVERY", 2.0)},
    "schedule-queued": {"task": "torchyard_server.jobs.tasks.schedule_queued", "schedule": 3.0},
    # The dashboards' machine table (live/tasks.py); one left waiting behind busier work is dropped.
    "broadcast-machines": {"task": "torchyard_server.live.tasks.broadcast_machines", "schedule": 2.0,
                           "options": {"expires": 2.0}},
    # Agents' Redis users: written again after a Redis restart, removed with their machines.
    "sync-agent-redis-users": {"task": "torchyard_server.machines.tasks.sync_agent_redis_users", "schedule": 10.0},
    # Running sweeps: what their trials reported reaches the pruner, ended trials make room for new ones.
    "tick-sweeps": {"task": "torchyard_server.sweeps.tasks.tick_sweeps", "schedule": 2.0, "options": {"expires": 2.0}},
    # Quarantined machines whose probation is over: their agents run a health check.
    "ask-health-checks": {"task": "torchyard_server.machines.tasks.ask_health_checks",
                          "schedule": env_float("TORCHYARD_HEALTH_CHECK_EVERY", 15.0)},
}

# --- Torchyard ----------------------------------------------------------------------------------
# Where checkpoints live: a directory (embedded) or s3://bucket/prefix. Unset, the Rust
# coordinator's settings name it: USE_S3=true with S3_BUCKET (CHECKPOINT_DIR a prefix in it), else
# CHECKPOINT_DIR; else the data directory's checkpoints/.
STORAGE_URL = env_str("TORCHYARD_STORAGE_URL") or coordinator_store_url(DATA_DIR / "checkpoints")
# S3 for the store (and bundles): the standard names, else the Rust coordinator's (S3_ENDPOINT,
# S3_ACCESS_KEY, S3_SECRET_KEY); unset credentials are boto3's own chain.
S3_ENDPOINT_URL = env_str("S3_ENDPOINT_URL") or env_str("AWS_ENDPOINT_URL") or env_str("S3_ENDPOINT")
S3_ACCESS_KEY = "" if env_str("AWS_ACCESS_KEY_ID") else env_str("S3_ACCESS_KEY")
S3_SECRET_KEY = "" if env_str("AWS_ACCESS_KEY_ID") else env_str("S3_SECRET_KEY")
# The Redis URL handed to agents that join with --server (their view of Redis may differ).
AGENT_REDIS_URL = env_str("TORCHYARD_AGENT_REDIS_URL", REDIS_URL)
# The authority (PEM) that signs the certificate of the Redis (and S3 store) agents reach over TLS,
# handed to them with their Redis URL (/api/agent/config): `TORCHYARD_AGENT_CA_FILE=ca.pem`, as
# `torchyard-server certs` writes it.
AGENT_CA_PEM = env_str("TORCHYARD_AGENT_CA")
if AGENT_CA_PEM and "-----BEGIN CERTIFICATE-----" not in AGENT_CA_PEM:
    raise ConfigError("TORCHYARD_AGENT_CA(_FILE): not a PEM certificate (give the ca.pem `torchyard-server certs` wrote)")
AGENT_CA_PEM = AGENT_CA_PEM and AGENT_CA_PEM.strip() + "\n"
# The URL agents on other machines reach this server by, for the join command the dashboard and
# the API show (`torchyard agent --server URL ...`); unset, the address the request came to.
PUBLIC_URL = env_str("TORCHYARD_PUBLIC_URL").rstrip("/")
if PUBLIC_URL and not re.match(r"^https?://[^/\s]+$", PUBLIC_URL):
    raise ConfigError(f"TORCHYARD_PUBLIC_URL={PUBLIC_URL!r}: give scheme and host, e.g. https://ctl.example.com")
# One Redis user per agent, allowed only its queue and streams (machines/redis_acl.py). On when
# Torchyard starts Redis itself; for your own Redis, REDIS_URL's user must be allowed ACL SETUSER.
REDIS_AGENT_ACL = env_bool("TORCHYARD_REDIS_AGENT_ACL", False)
# Seconds without an agent heartbeat before a machine is offline.
# One default with a node's heartbeat_timeout: agents beat every 2 s.
MACHINE_OFFLINE_AFTER = env_float("TORCHYARD_MACHINE_OFFLINE_AFTER", 10.0)
# Seconds a quarantined machine (a hang's verdict named one of its ranks as the one holding a job:
# machines.models.Machine.quarantined_at) waits before its agent's health check may release it;
# 0: only an operator releases it.
QUARANTINE_PROBATION = env_float("TORCHYARD_QUARANTINE_PROBATION", 600.0)
# Seconds `POST /api/network/machines/{id}/ping` and the health check wait for agents to answer.
PING_TIMEOUT = env_float("TORCHYARD_PING_TIMEOUT", 5.0)
# Seconds a node may stay "launching" before it counts as failed to start.
NODE_LAUNCH_TIMEOUT = env_float("TORCHYARD_NODE_LAUNCH_TIMEOUT", 90.0)
# Seconds a job may stay "stopping" before its unanswered nodes are written off as lost.
STOP_TIMEOUT = env_float("TORCHYARD_STOP_TIMEOUT", 30.0)
# Seconds a job resumed after a preemption runs before the queue may preempt it again (jobs/placement/queue.py):
# each resume makes progress instead of thrashing. 0: no minimum.
PREEMPTION_MIN_RUN = env_float("TORCHYARD_PREEMPTION_MIN_RUN", 120.0)
# The Rust coordinator's settings, under its own names: the defaults of a `POST /jobs` body
# (compat/coordinator/api.py; a body's own fields win). Unset, the JobSpec's defaults.
SEED001_DEFAULTS: dict[str, int | float | str] = {
    name.lower(): read(name)
    for name, read in (("JOB_ID", env_str), ("WORLD_SIZE", lambda n: env_int(n, 0)),
                       ("CHECKPOINT_EVERY", lambda n: env_int(n, 0)), ("SLEEP_SEC", lambda n: env_float(n, 0.0)),
                       ("DATASET_DIR", env_str), ("HEARTBEAT_TIMEOUT", lambda n: env_float(n, 0.0)),
                       ("MAX_RESTARTS", lambda n: env_int(n, 0)))
    if env_str(name).strip()
}
# Loopback requests without credentials from this server's own OS user act as the admin
# (accounts/local_peer.py), on the Rust coordinator's routes: on by default in embedded mode (SQLite).
LOCAL_PEER_AUTH = env_bool("TORCHYARD_LOCAL_PEER_AUTH", DATABASES["default"]["ENGINE"].endswith("sqlite3"))
LOCAL_PEER_USER = env_str("TORCHYARD_ADMIN_USER", "admin")
# The most bytes of files a code bundle may hold (and the most its archive may take).
BUNDLE_MAX_BYTES = env_int("TORCHYARD_BUNDLE_MAX_BYTES", 200 * 1024 * 1024)
# A function job's rank may return at most this much (pickled); a bigger value fails the rank with a
# message saying to write it to $TORCHYARD_OUTPUT_DIR instead. A spec may ask for less, never more.
RESULT_MAX_BYTES = env_int("TORCHYARD_RESULT_MAX_BYTES", 50 * 1024 * 1024)
# The placement policy of a job that names none (jobs/placement/policies.py; checked at start-up).
PLACEMENT_POLICY = env_str("TORCHYARD_PLACEMENT_POLICY", "pack")
MASTER_PORT_RANGE = (env_int("TORCHYARD_MASTER_PORT_MIN", 29500), env_int("TORCHYARD_MASTER_PORT_MAX", 29999))
# Environment variables a job may set although they are refused by default (loader and interpreter
# hooks, Torchyard's own: jobs/intake/serializer.py REFUSED_ENV): names, or prefixes ending in `*` (`LD_*`).
ALLOWED_JOB_ENV = env_list("TORCHYARD_ALLOWED_JOB_ENV", [])
# Fernet keys that seal job secrets (JobSpec secret_env) in the database, comma-separated: the first
# seals, all open (rotation). Default: a key derived from SECRET_KEY (secretbox.py).
SECRET_ENV_KEYS = [key.strip() for key in env_str("TORCHYARD_SECRET_ENV_KEY").split(",") if key.strip()]
for _key in SECRET_ENV_KEYS:
    try:
        Fernet(_key)
    except ValueError:
        raise ConfigError("TORCHYARD_SECRET_ENV_KEY: not a Fernet key (32 url-safe base64-encoded bytes; "
                          "make one with `python -c 'from cryptography.fernet import Fernet; "
                          "print(Fernet.generate_key().decode())'`)") from None

# The bearer token a Prometheus server scrapes /metrics with (`authorization: credentials_file:`);
# unset, only staff users' API tokens and sessions may read it.
METRICS_TOKEN = env_str("TORCHYARD_METRICS_TOKEN")

# --- Static files and the built dashboard --------------------------------------------------------
STATIC_URL = "static/"
STATIC_ROOT = DATA_DIR / "static"
FRONTEND_DIST = Path(env_str("TORCHYARD_FRONTEND_DIST", str(REPO_ROOT / "frontend" / "dist")))

# --- Auth and API --------------------------------------------------------------------------------
LOGIN_URL = "/login"
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
CSRF_FAILURE_VIEW = "torchyard_server.web.errors.csrf_failure"  # JSON, as every other refusal

AUTHENTICATION_BACKENDS = [
    # First: refuses, before any password is checked, a username locked out from this address.
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
# API tokens (accounts/models.py): knox's, hashed, several per user; `Authorization: Token <t>`.
KNOX_TOKEN_MODEL = "accounts.ApiToken"
REST_KNOX = {
    "TOKEN_MODEL": KNOX_TOKEN_MODEL,
    "TOKEN_TTL": None,  # a token expires only when its owner asks (expires_in_days)
    "AUTH_HEADER_PREFIX": "Token",
}
# Knox's own migrations create its default token table even when the model is swapped for ours
# (they predate the setting): an orphan that holds a key to auth_user and breaks flushes. None.
MIGRATION_MODULES = {"knox": None}
# Lockout (django-axes): this many failed sign-ins for one username from one address lock that
# pair for TORCHYARD_LOGIN_LOCKOUT_MINUTES (429); a success forgets the failures. The dashboard's
# login, API token creation and the Django admin's login all count.
AXES_FAILURE_LIMIT = env_int("TORCHYARD_LOGIN_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = timedelta(minutes=env_float("TORCHYARD_LOGIN_LOCKOUT_MINUTES", 15.0))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "torchyard_server.accounts.lockout.lockout_response"
AXES_VERBOSE = False  # its start-up banner, in every process
# Sign-in attempts per client address (DRF throttling, in the web process's memory) on
# /api/auth/login and /api/auth/token: N/second, N/minute, N/hour or N/day.
LOGIN_RATE = env_str("TORCHYARD_LOGIN_RATE", "10/minute")
if not re.fullmatch(r"\d+/(second|minute|hour|day)", LOGIN_RATE):
    raise ConfigError(f"TORCHYARD_LOGIN_RATE={LOGIN_RATE!r} is not N/second, N/minute, N/hour or N/day")

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "torchyard_server.accounts.auth.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_THROTTLE_RATES": {"login": LOGIN_RATE},
    # The client's address is REMOTE_ADDR (daphne's --proxy-headers puts a proxy's X-Forwarded-For
    # there): a client-sent X-Forwarded-For must not choose its own throttle bucket.
    "NUM_PROXIES": 0,
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "torchyard_server.rest.openapi.AutoSchema",
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "EXCEPTION_HANDLER": "torchyard_server.web.errors.exception_handler",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Torchyard API",
    "DESCRIPTION": "Machines, jobs, events and checkpoints of a Torchyard control plane.",
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # Only /api/health and the login page answer anonymously.
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
    # Operation ids and tags from the path after /api/ ("jobs_list", tag "jobs").
    "SCHEMA_PATH_PREFIX": r"/api/",
    # Names for the choice sets, so generated clients get stable, meaningful types.
    "ENUM_NAME_OVERRIDES": {
        "JobStatusEnum": "torchyard_server.jobs.models.Job.Status",
        "NodeStatusEnum": "torchyard_server.jobs.models.JobNode.Status",
        "MachineStatusEnum": "torchyard_server.machines.models.Machine.Status",
        "MachineStatusChangeEnum": ["draining", "online"],
        "EventTypeEnum": "torchyard_server.streaming.models.JobEvent.Type",
        "PlannedBackendEnum": ["gloo", "nccl"],
        "DistributedBackendEnum": ["auto", "gloo", "nccl"],
        "TaskTypeEnum": ["TRAIN"],
        "StragglerPolicyEnum": "torchyard_server.jobs.spec.jobspec.STRAGGLER_POLICIES",
        "RecoveryModeEnum": "torchyard_server.jobs.spec.jobspec.RECOVERY_MODES",
        "ScalingModeEnum": ["keep_global_batch", "scale_global_batch", "none"],
        "SweepStatusEnum": "torchyard_server.sweeps.models.Sweep.Status",
        "TrialStatusEnum": "torchyard_server.sweeps.models.Trial.Status",
        "GoalEnum": ["min", "max"],  # a metric is best at its min or its max: experiments, sweeps
    },
    # The WebSocket streams' messages, events and close codes (live/contract_schema.py).
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "torchyard_server.live.contract_schema.add_stream_contract",
    ],
}

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("TORCHYARD_LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}
