from __future__ import annotations

import pytest
import redis_databases

from .browser import chromium, screenshot_folder
from .netns import Cluster, open_cluster
from .shared import Shared, settle
from .stack import Stack, start_pg_stack, start_stack, stop_pg_stack

# The integration tier runs on two pytest-xdist workers, a module at a time each (`--dist loadfile`),
# and a worker done with one module takes the next in collection order. Met last, a long module
# leaves the other worker idle for its length: these, the longest in the ledger (var/test-ledger.json),
# go first, longest first; every other module follows in its usual order. A new module of a minute or
# more joins the list.
LONGEST_FIRST = (
    "test_kill_matrix", "test_ray_jobs", "test_crash_only", "test_job_exits", "test_dashboard_in_a_browser",
    "test_embedded_mode", "test_preemption", "test_agent_distribution", "test_elastic", "test_elastic_hosts",
    "test_volumes", "test_recovery", "test_s3_checkpoints", "test_sweeps", "test_functions", "test_warm_start",
    "test_seed001",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        return LONGEST_FIRST.index(item.path.stem) if item.path.stem in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: each module's tests keep their order


# --- the shared stacks (shared.py): one per pytest session, checked on each module's entry ---------
@pytest.fixture(scope="session")
def _shared_pg(tmp_path_factory):
    with Shared("pg", lambda: start_pg_stack(tmp_path_factory.mktemp("pg-stack"),
                                             redis_offset=redis_databases.SHARED_PG_STACK), stop_pg_stack, settle) as shared:
        yield shared


@pytest.fixture(scope="module")
def pg_stack(_shared_pg) -> Stack:
    """The shared production-shaped stack (PostgreSQL, the machine's Redis, two local agents), as a
    fresh one would be on this module's entry."""
    return _shared_pg.for_module()


@pytest.fixture(scope="session")
def _shared_embedded(tmp_path_factory):
    # The Rust coordinator's coordinator settings, as its users set them (they are only the defaults of its own
    # `POST /jobs`): quick steps for its test, nothing for anyone else's.
    with Shared("embedded", lambda: start_stack(
            tmp_path_factory.mktemp("embedded-stack"), env={"SLEEP_SEC": "0.02", "CHECKPOINT_EVERY": "10"}),
            Stack.stop, settle) as shared:
        yield shared


@pytest.fixture(scope="module")
def embedded_stack(_shared_embedded) -> Stack:
    """The shared stack `make run` starts (SQLite, its own Redis, two local agents), as a fresh one
    would be on this module's entry."""
    return _shared_embedded.for_module()


@pytest.fixture(scope="session")
def _shared_cluster(tmp_path_factory):
    with Shared("hosts apart", lambda: open_cluster(tmp_path_factory.mktemp("hosts-apart"), hosts=3),
                lambda cluster: cluster.close(), Cluster.settle) as shared:
        yield shared


@pytest.fixture(scope="module")
def cluster(_shared_cluster) -> Cluster:
    """The shared three hosts apart (netns.py: a network namespace each, its agent in it, the stack
    on the bridge), as separate_hosts would make them on this module's entry. A module that needs
    another shape (volumes, TLS, Ray's environment) defines its own `cluster`."""
    return _shared_cluster.for_module()


@pytest.fixture(scope="module")
def browser():
    """One headless Chromium per browser module; each test opens a fresh context of it."""
    with chromium() as launched:
        yield launched


@pytest.fixture
def shots(request):
    """Where a browser test's screenshots go: var/screenshots/<test>/ in the repository."""
    return screenshot_folder(request.node.name)
