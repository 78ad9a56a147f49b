"""`torchyard-server run` (what `make run` calls): the whole stack in the foreground.

Starts, on embedded defaults unless the environment says otherwise (DESIGN.md section 2):
a Redis of its own (when REDIS_URL is unset: a password for its default user, one user per
agent), the database migrations, the admin user, then
  web         daphne serving Django + Channels + the dashboard
  controller  Celery worker on queue "control"
  beat        Celery beat: the periodic supervision sweeps and scheduling
  ingest      the event ingest loop (Redis stream -> database -> WebSockets)
  local-N     agents for this machine (TORCHYARD_LOCAL_AGENTS, default 2)
and stops all of it, running training included, on Ctrl-C / SIGTERM (at any moment, start-up
included).

Crash-only: whatever ends the launcher (kill -9, the OOM killer), its children end with it
(torchyard/lifeline.py), except the node supervisors and ranks, which train on. One launcher per
data directory (a lock there); the next one ends what an earlier one left of the control plane and
re-attaches to its training, or ends it and resumes the jobs from their checkpoints (generations.py).

`torchyard-server certs --out DIR --host NAME` writes a production install's TLS material (certs.py).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from torchyard import lifeline

from . import generations
from .embedded_redis import EmbeddedRedis

PY = sys.executable
# Every child starts through it: SIGKILL when the launcher dies (parent_death.py).
PARENT_DEATH = (PY, "-I", "-S", str(Path(__file__).with_name("parent_death.py")))
# Exit status when another launcher holds the data directory (sysexits.h EX_TEMPFAIL: try later).
EXIT_LOCKED = 75
STOP_GRACE = 10.0
# A child may be restarted this many times within the window before the stack gives up on it.
MAX_RESTARTS = 5
RESTART_WINDOW = 60.0
# What the local agents (and so the jobs they run) must not inherit: the server's own secrets and
# its Redis URL (the default user's password). Each gets its token and its own Redis user instead.
SERVER_ONLY_ENV = tuple(
    name + suffix
    for name in ("REDIS_URL", "DATABASE_URL", "SECRET_KEY", "TORCHYARD_SECRET_KEY", "TORCHYARD_SECRET_ENV_KEY",
                 "TORCHYARD_ADMIN_PASSWORD", "TORCHYARD_AGENT_REDIS_URL")
    for suffix in ("", "_FILE")
)


class DataDirLocked(RuntimeError):
    """Another launcher runs on the data directory."""


class StopRequested(Exception):
    """A signal asked for a stop during start-up: what started so far is stopped."""


def stop_requested(exc: BaseException | None) -> bool:
    """Whether `exc` is, or was raised because of, StopRequested: the signal may land inside code that
    wraps what it raises (Python wraps an exception of a class body's `__set_name__` in a RuntimeError,
    as it does while Django's models are imported)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, StopRequested):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


@dataclass
class Child:
    name: str
    argv: list[str]
    env: dict[str, str] | None = None  # None: the launcher's own
    proc: subprocess.Popen | None = None
    started: list[float] = field(default_factory=list)  # monotonic start times, for the restart budget


def _say(message: str) -> None:
    print(f"torchyard | {message}", flush=True)


def _pump(name: str, stream) -> None:
    width = 10
    for raw in iter(stream.readline, b""):
        sys.stdout.write(f"{name:<{width}} | {raw.decode(errors='replace').rstrip()}\n")
        sys.stdout.flush()


class Stack:
    def __init__(self, *, host: str, port: int, agents: int, data_dir: Path):
        self.host, self.port, self.agents, self.data_dir = host, port, agents, data_dir
        self.children: list[Child] = []
        self.redis: EmbeddedRedis | None = None
        # Set by the signal handler, so a plain attribute: a threading.Event's set() takes a lock
        # that the code the signal interrupted may hold.
        self.stopping = False
        # While set, a signal raises StopRequested at once instead of waiting for the step to end:
        # the migrations (seconds), which a crash-only start may abandon (each runs in a transaction).
        self.interruptible = False
        self._database_ready = False
        self.generation = f"{os.getpid()}-{time.time_ns()}"
        self.previous: list[generations.LiveNode] = []  # supervisors an earlier run left running

    # --- set-up ---------------------------------------------------------------------------------
    def lock_data_dir(self) -> None:
        """One stack per data dir: a second one would share its agents' run directories."""
        from torchyard.held_lock import Held, hold

        self.data_dir.mkdir(parents=True, exist_ok=True)
        try:
            lock = hold(self.data_dir / "launcher.lock")
        except Held as held:
            raise DataDirLocked(f"another Torchyard stack (pid {held.holder}) is running on {self.data_dir}; "
                                "stop it first, or give this one another --data-dir") from None
        self._lock = lock  # only now: shutdown() stops nothing of a stack it did not lock

    def identity(self, role: str) -> dict[str, str]:
        """What every child carries: how the next launcher on this data directory finds it, and
        the parent whose death ends it (torchyard/lifeline.py)."""
        return {lifeline.ENV_STACK_DIR: str(self.data_dir), lifeline.ENV_STACK_ROLE: role,
                lifeline.ENV_STACK_GENERATION: self.generation, lifeline.ENV_LAUNCHER_PID: str(os.getpid())}

    def check_stop(self) -> None:
        if self.stopping:
            raise StopRequested

    def settle_previous(self) -> None:
        """End the control plane an earlier run on this data directory left (it holds the port and
        would consume our queues) and note the training it left running (re-attached later)."""
        left = generations.control_plane_left(self.data_dir)
        if left:
            _say(f"ending what an earlier run on {self.data_dir} left running: "
                 + ", ".join(f"{generations.role_of(p)} (pid {p.pid})" for p in left))
            survivors = generations.end_control_plane(left)
            if survivors:
                raise RuntimeError(f"processes of an earlier run would not end: {survivors}")
        self.previous = generations.live_nodes(self.data_dir)
        if self.previous:
            _say(f"found {len(self.previous)} node supervisor(s) of an earlier run still training")

    def prepare_env(self) -> None:
        self.lock_data_dir()
        self.settle_previous()
        self.check_stop()
        os.environ["TORCHYARD_DATA_DIR"] = str(self.data_dir)
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "torchyard_server.settings")
        if not os.environ.get("SECRET_KEY") and not os.environ.get("SECRET_KEY_FILE"):
            key_file = self.data_dir / "secret_key"
            if not key_file.exists():
                key_file.write_text(secrets.token_urlsafe(50))
                key_file.chmod(0o600)
            os.environ["SECRET_KEY_FILE"] = str(key_file)
        if not os.environ.get("REDIS_URL"):
            self.redis = self._start_redis()
            os.environ["REDIS_URL"] = self.redis.url
            os.environ.setdefault("TORCHYARD_REDIS_AGENT_ACL", "on")
            _say(f"started Redis on redis://127.0.0.1:{self.redis.port}/0 with a password "
                 f"({self.data_dir / 'redis' / 'redis.conf'}) and a user per agent (set REDIS_URL to use your own)")
        hosts = os.environ.get("ALLOWED_HOSTS")
        if hosts is None and self.host not in ("127.0.0.1", "localhost", "0.0.0.0"):
            os.environ["ALLOWED_HOSTS"] = f"127.0.0.1,localhost,{self.host}"
        elif hosts is None and self.host == "0.0.0.0":
            os.environ["ALLOWED_HOSTS"] = "*"

    def _start_redis(self) -> EmbeddedRedis:
        """A new password each start (what the server keeps on disk is its data, not its users);
        agents get users of their own. On the port the earlier run's Redis had when its training still runs: its supervisors
        reconnect there (generations.py), else on a free one."""
        from .embedded_redis import start_redis

        def start(port: int | None) -> EmbeddedRedis:
            return start_redis(self.data_dir / "redis", port, password=secrets.token_urlsafe(32),
                               wrapper=(*PARENT_DEATH, str(os.getpid())), env={**os.environ, **self.identity("redis")})

        port = generations.redis_port(self.previous)
        if port is not None:
            try:
                return start(port)
            except RuntimeError as exc:  # the port went to someone else: those nodes are ended later
                _say(f"cannot start Redis on port {port} again ({exc}); on another port")
        return start(None)

    def prepare_database(self) -> list[tuple[str, str, str]]:
        """Migrate, make sure the admin exists, (re)issue the local agents' tokens and write the
        agents' Redis users; returns each local agent's name, token and Redis URL."""
        import django

        django.setup()
        from django.conf import settings
        from django.contrib.auth import get_user_model
        from django.core.management import call_command

        from ..machines import redis_acl
        from ..machines.models import Machine
        from ..machines.services import machine_authenticate, machine_create, machine_rotate_token

        _say(f"database: {settings.DATABASES['default']['ENGINE'].rsplit('.', 1)[-1]} "
             f"{settings.DATABASES['default']['NAME']}")
        call_command("migrate", interactive=False, verbosity=0)
        User = get_user_model()
        username = os.environ.get("TORCHYARD_ADMIN_USER", "admin")
        if not User.objects.filter(username=username).exists():
            password = os.environ.get("TORCHYARD_ADMIN_PASSWORD")
            generated = not password
            password = password or secrets.token_urlsafe(12)
            User.objects.create_superuser(username=username, email="", password=password)
            if generated:
                _say(f"created admin user {username!r} with password {password!r} (shown once; "
                     "set TORCHYARD_ADMIN_PASSWORD to choose it)")
            else:
                _say(f"created admin user {username!r} from TORCHYARD_ADMIN_PASSWORD")
        tokens = []
        # The tokens an earlier run's supervisors still use (their launch.json, 0600 in the data dir).
        kept = {node.agent: node.machine_token for node in self.previous if node.machine_token}
        for index in range(self.agents):
            name = f"local-{index}"
            machine = Machine.objects.filter(name=name).first()
            if machine is None:
                machine, token = machine_create(name=name, host="127.0.0.1", labels={"local": "true"})
            elif name in kept and machine_authenticate(token=kept[name]) == machine:
                # Kept, so is the machine's Redis user (its password follows the token): the
                # supervisors that still train reconnect with what they have (reattach()).
                token = kept[name]
            else:
                # Only hashes are stored: a fresh token per start hands the agent a usable one.
                token = machine_rotate_token(machine=machine)
            tokens.append((name, token, redis_acl.agent_url(machine)))
        # Every machine's user, the remote ones' too: a Redis of our own starts with none.
        redis_acl.sync_agent_users()
        from django.db import connections

        connections.close_all()
        self._database_ready = True
        return tokens

    def reattach(self, tokens: list[tuple[str, str, str]]) -> None:
        """Re-attach the earlier run's supervisors that reach this stack (their Redis URL is their
        agent's now), end the others, and resume the jobs of every node that did not survive."""
        from django.db import connections

        from ..jobs.control.reattach import jobs_resume_lost_nodes, nodes_matching, nodes_reattach

        urls = {name: url for name, _, url in tokens}
        candidates = [node for node in self.previous if generations.reattachable(node, urls)]
        keep = nodes_matching(nodes=[(node.node_id, node.job_id, node.attempt) for node in candidates])
        interrupted, doomed = jobs_resume_lost_nodes(machine_names=list(urls), alive_node_ids=keep)
        keep -= doomed
        generations.end_nodes([node for node in self.previous if node.node_id not in keep])
        nodes_reattach(node_ids=keep)
        connections.close_all()
        if self.previous:
            _say(f"re-attached {len(keep)} and ended {len(self.previous) - len(keep)} node supervisor(s) "
                 "of an earlier run")
        if interrupted:
            _say(f"interrupted job(s) {', '.join(map(str, interrupted))} of an earlier run: they resume "
                 "from the last checkpoint")

    # --- processes ------------------------------------------------------------------------------
    @property
    def local_host(self) -> str:
        """How processes on this machine reach the web process."""
        return "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host

    def plan_children(self, tokens: list[tuple[str, str, str]]) -> None:
        self.children = [
            # daphne on uvloop (web_loop.py: the loop must be chosen before daphne imports its server).
            Child("web", [PY, "-m", "torchyard_server.runtime.web_loop", "daphne", "-b", self.host, "-p", str(self.port),
                          "--proxy-headers", "torchyard_server.asgi:application"]),
            Child("controller", [PY, "-m", "celery", "-A", "torchyard_server", "worker", "-Q", "control",
                                 "-P", "threads", "-c", "4", "-n", "controller@%h",
                                 # WARNING: the sweeps every 2 s would drown the console at INFO.
                                 "--without-gossip", "--without-mingle", "-l", "WARNING"]),
            # Beat is a child of its own, not the worker's embedded one (-B): a worker killed with -9
            # left that one running beside its successor's, sending every periodic task twice.
            Child("beat", [PY, "-m", "celery", "-A", "torchyard_server", "beat", "-l", "WARNING",
                           "-s", str(self.data_dir / "celerybeat-schedule"), "--pidfile="]),
            Child("ingest", [PY, "-m", "django", "ingest_events"]),
        ]
        agent_env = {k: v for k, v in os.environ.items() if k not in SERVER_ONLY_ENV}
        for name, token, redis_url in tokens:
            self.children.append(Child(name, [
                PY, "-m", "torchyard.cli", "agent",
                # The server URL too: nodes fetch the jobs' code bundles from it.
                "--server", f"http://{self.local_host}:{self.port}",
                "--work-dir", str(self.data_dir / "agents" / name)],
                # Secrets in the environment, not in argv, which every local user can list.
                env={**agent_env, "TORCHYARD_MACHINE_TOKEN": token, "TORCHYARD_REDIS_URL": redis_url}))

    def start_children(self) -> None:
        for child in self.children:
            self.check_stop()
            self.start(child)

    def start(self, child: Child) -> None:
        # From the main thread only: the parent-death signal fires when the thread that forked the
        # child ends, not the process.
        env = {**(os.environ if child.env is None else child.env), **self.identity(child.name)}
        child.proc = subprocess.Popen(
            [*PARENT_DEATH, str(os.getpid()), *child.argv], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, start_new_session=True, env=env,
        )
        child.started.append(time.monotonic())
        threading.Thread(target=_pump, args=(child.name, child.proc.stdout), daemon=True).start()

    def wait_ready(self, timeout: float = 60.0) -> bool:
        url = f"http://{'127.0.0.1' if self.host in ('0.0.0.0', '::') else self.host}:{self.port}/api/health"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self.stopping:
            if any(c.proc and c.proc.poll() is not None for c in self.children):
                return False
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        return True
            except OSError:
                time.sleep(0.3)
        return False

    def watch(self) -> int:
        """Block until a stop is asked for. A child that dies is started again (training goes on
        meanwhile: supervisors do not depend on their agent); one that keeps dying stops the stack."""
        while not self.stopping:
            time.sleep(0.5)
            if self.stopping:
                break
            for child in self.children:
                if child.proc is None or child.proc.poll() is None:
                    continue
                if child.name.startswith("local-") and child.proc.returncode == 0:
                    # An agent exits 0 when the control plane removed its machine: its token and
                    # Redis user are gone, so starting it again would only fail.
                    _say(f"{child.name} stopped: its machine was removed")
                    child.proc = None
                    continue
                recent = [t for t in child.started if t > time.monotonic() - RESTART_WINDOW]
                if len(recent) >= MAX_RESTARTS:
                    _say(f"{child.name} exited with {child.proc.returncode} {len(recent)} times in "
                         f"{RESTART_WINDOW:.0f}s; stopping the stack")
                    return 1
                _say(f"{child.name} exited with {child.proc.returncode}; starting it again")
                # Whatever it forked and left behind dies with it: its session's process group.
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(child.proc.pid, signal.SIGKILL)
                self.start(child)
        return 0

    def shutdown(self) -> None:
        self.stopping = True
        if not hasattr(self, "_lock"):
            return  # nothing of ours started
        try:
            # Nothing may relaunch what is being interrupted: the controller and beat go first, while
            # the ingest loop and the agents stay to report how each node ended.
            self._stop_children(only={"controller", "beat"})
            self._stop_training()
        finally:
            # Whatever failed above, no child may outlive the launcher: an orphaned agent or ingest
            # loop would go on consuming the queues and the event stream of the next stack.
            self._stop_children()
            if self.redis is not None:
                self.redis.stop()
        _say("stopped")

    def _stop_training(self) -> None:
        """Training first, while the agents and the event path still run to report it. Jobs it
        interrupts resume from their last checkpoint on the next start, without using a restart."""
        from torchyard.agent.runs import stop_all

        if self._database_ready:
            from django.db import connections

            from ..jobs.control.recovery import jobs_interrupt

            try:
                interrupted = jobs_interrupt(reason="interrupted: Torchyard was stopped; it resumes from the "
                                             "last checkpoint when Torchyard starts again")
                if interrupted:
                    _say(f"interrupted job(s) {', '.join(map(str, interrupted))}: they resume on the next start")
                connections.close_all()
            except Exception as exc:  # the database may be what failed; stopping must go on
                _say(f"could not mark running jobs as interrupted: {exc}")
        for index in range(self.agents):
            try:
                stop_all(self.data_dir / "agents" / f"local-{index}")
            except Exception as exc:
                _say(f"could not stop the training of local-{index}: {exc}")

    def _stop_children(self, only: set[str] | None = None) -> None:
        """SIGTERM every child's process group (whatever a child forked is in it), SIGKILL
        what is still there after the grace period. `only` names the children to stop."""
        children = [c for c in self.children if only is None or c.name in only]
        for child in reversed(children):
            if child.proc and child.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE
        for child in children:
            if child.proc is None:
                continue
            try:
                child.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _say(f"{child.name} did not stop in {STOP_GRACE:.0f}s; killing it")
            # The group too: a child that exited may leave a forked helper behind.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child.proc.pid, signal.SIGKILL)
            child.proc.wait()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["certs"]:  # the one-time TLS material of a production install (certs.py)
        from .certs import main as certs_main
        return certs_main(argv[1:])
    parser = argparse.ArgumentParser(prog="torchyard-server", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["run"], nargs="?", default="run")
    parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
    parser.add_argument("--agents", type=int, default=int(os.environ.get("TORCHYARD_LOCAL_AGENTS", "2")))
    parser.add_argument("--data-dir", default=os.environ.get("TORCHYARD_DATA_DIR", "var"))
    parser.add_argument("--policy", help="the placement policy of a job that names none (default pack; the Go "
                        "scheduler's server's --policy): TORCHYARD_PLACEMENT_POLICY for every process of the stack")
    args = parser.parse_args(argv)
    if args.policy:
        os.environ["TORCHYARD_PLACEMENT_POLICY"] = args.policy

    stack = Stack(host=args.host, port=args.port, agents=args.agents, data_dir=Path(args.data_dir).resolve())

    def on_signal(signum, frame):
        stack.stopping = True
        if stack.interruptible:
            stack.interruptible = False
            raise StopRequested

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    code = 1
    try:
        stack.prepare_env()
        stack.interruptible = True
        try:
            tokens = stack.prepare_database()
        finally:
            stack.interruptible = False
        stack.check_stop()
        stack.reattach(tokens)
        stack.check_stop()
        stack.plan_children(tokens)
        stack.start_children()
        if stack.wait_ready():
            shown = "127.0.0.1" if args.host in ("0.0.0.0", "::") else args.host
            _say(f"ready: dashboard http://{shown}:{args.port}/  API http://{shown}:{args.port}/api/docs/ "
                 "(Ctrl-C stops everything)")
            code = stack.watch()
        elif not stack.stopping:
            _say("the web process did not come up; stopping")
        else:
            code = 0
    except StopRequested:
        code = 0
    except DataDirLocked as exc:
        _say(f"failed: {exc}")
        return EXIT_LOCKED
    except Exception as exc:  # anything at start-up: say it plainly, then clean up what started
        if stop_requested(exc):
            code = 0
        else:
            _say(f"failed: {exc}")
            code = 1
    finally:
        stack.shutdown()
    return code


if __name__ == "__main__":
    sys.exit(main())
