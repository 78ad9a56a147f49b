"""The `torchyard` command: run your code on the cluster, talk to a server's API, or run an agent.

    torchyard run [--nnodes N|MIN:MAX] [--nproc-per-node P] [-m] SCRIPT|MODULE [ARGS...]
    torchyard submit job.yaml [--detach]          (a JobSpec, YAML or JSON; `code: {dir: "."}` uploads a project)
    torchyard submit [--config task.json] [--name N --gpus G --memory MB --param K=V]   (a Go scheduler task)
    torchyard logs JOB [--follow] | artifacts JOB [--out DIR] | results JOB [--out DIR] | jobs | machines | stop JOB
    torchyard stacks JOB                              (every rank's Python stack, now) | machines release NAME
    torchyard monitor [--worker NAME] [--refresh 1]   (machines, their GPUs and the task on each, live)
    torchyard queue [--project P] [--json] | usage [--by project|user|machine] [--since 7d] [--bucket day] [--json]
    torchyard priority JOB low|normal|high|N        (run and submit take --priority and --time-limit too)
    torchyard login [--username U] | token create NAME [--expires-days N] | token list | token revoke ID
    torchyard plugin push DIR [--name NAME] | plugin list | plugin rm NAME   (TransformerLab-style plugins)
    torchyard validate [--json] [--keep] [--timeout 300]   (the installation checked end to end, the Rust coordinator's validate.py)
    torchyard agent --server http://HOST:8000 --token TOKEN [--addr HOST]

`run` and `submit` pack the project directory, upload it unless the server already has it, submit
the job and follow it live until it ends (exit 0 completed, 1 failed or stopped; Ctrl-C detaches).
API commands read TORCHYARD_SERVER and TORCHYARD_TOKEN (get a token with `torchyard login`).
"""

from __future__ import annotations

import argparse
import getpass
import logging
import os
import re
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from torchyard.client import CliError
from torchyard.client.artifacts import show_or_download
from torchyard.client.follow import JobRenderer, follow_job
from torchyard.client.http import ApiClient
from torchyard.client.monitor import monitor
from torchyard.client.output import JobShown
from torchyard.client.plugins import plugin_lines, push_plugin, remove_plugin
from torchyard.client.results import show_results
from torchyard.client.sharing import apply_queue_options, set_priority, show_queue, show_usage
from torchyard.client.specfile import (
    DEFAULT_TASK_MEMORY,
    JobSpecBody,
    LoadedSpec,
    entrypoint_in,
    in_file_terms,
    load_spec_file,
    nnodes_arg,
    parse_env,
    run_spec,
    secret_env_from,
    task_spec,
)
from torchyard.client.tokens import (
    create_token,
    default_token_name,
    list_tokens,
    revoke_token,
    show_created,
    sign_in,
    token_lines,
)
from torchyard.client.upload import upload_project


# --- agent ----------------------------------------------------------------------------------------
def cmd_agent(args: argparse.Namespace) -> int:
    from torchyard import protocol, tls
    from torchyard.agent.capabilities import check_declaration, parse_gpu_declaration
    from torchyard.agent.main import Agent, AgentError, fetch_config, parse_addr
    from torchyard.agent.volumes import parse_declaration as parse_volume_declaration

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # Read, then dropped from the environment the supervisors and the jobs' ranks inherit.
    env_token, env_redis_url = os.environ.pop("TORCHYARD_MACHINE_TOKEN", ""), os.environ.pop("TORCHYARD_REDIS_URL", "")
    token, redis_url = args.token or env_token, args.redis_url or env_redis_url
    token_file = args.token_file or os.environ.get("TORCHYARD_MACHINE_TOKEN_FILE")
    if not token and token_file:
        try:
            token = Path(token_file).read_text().strip()
        except OSError as exc:
            raise CliError(f"--token-file: {exc}") from None
    try:
        machine_id, _ = protocol.parse_machine_token(token)
    except ValueError as exc:
        raise CliError(f"--token: {exc}") from None
    try:
        addr = parse_addr(args.addr) if args.addr is not None else ""
    except ValueError as exc:
        raise CliError(f"--addr {args.addr}: {exc}") from None
    try:
        # Before anything connects: a GPU that is not there would fail every job placed on it.
        gpus = parse_gpu_declaration(args.gpus, args.models, args.memories)
        if gpus is not None:
            check_declaration(gpus)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    work_dir = Path(args.work_dir or Path.home() / ".torchyard" / f"agent-{machine_id}").resolve()
    # A private authority (`torchyard-server certs`) trusted beside the system's: for the server's
    # HTTPS and a rediss:// Redis; exported so the node supervisors' bundle downloads trust it too.
    ca_file = args.ca_file or os.environ.get("TORCHYARD_CA_FILE", "")
    if ca_file:
        if not os.path.isfile(ca_file):
            raise CliError(f"--ca-file: {ca_file} is not a file")
        ca_file = os.environ["TORCHYARD_CA_FILE"] = os.path.abspath(ca_file)
    if not redis_url:
        if not args.server:
            raise CliError("give --server URL (or --redis-url URL)")
        try:
            config = fetch_config(args.server, token, ca_file=ca_file or None)
            redis_url = config["redis_url"]
            # The authority the server's Redis certificate comes from, when the server names one.
            if config.get("ca_pem"):
                ca_file = str(tls.store_ca(work_dir, config["ca_pem"]))
        except (AgentError, ValueError) as exc:
            raise CliError(str(exc)) from None
    redis_url = tls.secure_redis_url(redis_url, ca_file or None)
    python = args.python or os.environ.get("TORCHYARD_PYTHON", "")
    if python:
        if not (os.path.isfile(python) and os.access(python, os.X_OK)):
            raise CliError(f"--python: {python} is not an executable file")
        python = os.path.abspath(python)
    volumes: dict[str, str] = {}
    for text in args.volume:
        try:
            name, path = parse_volume_declaration(text)
        except ValueError as exc:
            raise CliError(f"--volume {exc}") from None
        volumes[name] = path  # its storage class (,class=CLASS) travels with the path to the heartbeat
    try:
        agent = Agent(token=token, redis_url=redis_url, work_dir=work_dir, concurrency=args.concurrency,
                      server_url=(args.server or "").rstrip("/"), python=python, volumes=volumes, gpus=gpus,
                      ca_file=ca_file or None, addr=addr, memory_port=args.memory_port)
    except OSError as exc:  # the memory store's port is taken
        raise CliError(f"--memory-port {args.memory_port}: cannot listen there ({exc.strerror or exc})") from None
    agent.run()
    return 0


# --- API client -----------------------------------------------------------------------------------
def _server(args: argparse.Namespace) -> str:
    return (args.server or os.environ.get("TORCHYARD_SERVER") or "http://127.0.0.1:8000").rstrip("/")


def _client(args: argparse.Namespace) -> ApiClient:
    return ApiClient(_server(args), args.api_token or os.environ.get("TORCHYARD_TOKEN"))


def cmd_login(args: argparse.Namespace) -> int:
    if not args.username:
        print("username: ", end="", file=sys.stderr, flush=True)  # stdout is for the token alone
    username = args.username or input()
    password = os.environ.get("TORCHYARD_PASSWORD") or getpass.getpass("password: ")
    created = sign_in(ApiClient(_server(args), None), username=username, password=password,
                      name=args.name or default_token_name(), expires_days=args.expires_days)
    show_created(created, Console(), Console(stderr=True))
    return 0


def cmd_token_create(args: argparse.Namespace) -> int:
    created = create_token(_client(args), name=args.name, expires_days=args.expires_days)
    show_created(created, Console(), Console(stderr=True))
    return 0


def cmd_token_list(args: argparse.Namespace) -> int:
    for line in token_lines(list_tokens(_client(args))):
        print(line)
    return 0


def cmd_token_revoke(args: argparse.Namespace) -> int:
    revoke_token(_client(args), args.id)
    print(f"API token {args.id} revoked")
    return 0


def _print_job(job: JobShown) -> None:
    progress = job.get("progress") or {}
    step = progress.get("step")
    total = progress.get("total_steps")
    where = f"step {step}/{total}" if step is not None else ""
    print(f"#{job['id']:<5} {job['status']:<12} {job['name'][:40]:<40} world={job.get('world_size') or '-':<4} {where}")


def _launch(args: argparse.Namespace, api: ApiClient, spec: JobSpecBody | dict[str, Any], console: Console) -> int:
    """Submit the spec, then follow the job to its end, or with --detach say how to follow it."""
    job = api.call("POST", "/api/jobs", spec)
    _print_job(job)
    if args.detach:
        print(f"job {job['id']} submitted: follow it with `torchyard logs {job['id']} --follow`, "
              f"stop it with `torchyard stop {job['id']}`")
        return 0
    return follow_job(api, job["id"], console, Console(stderr=True))


def cmd_submit(args: argparse.Namespace) -> int:
    loaded = _submitted(args)
    for note in loaded.notes:
        print(note, file=sys.stderr)
    api, console = _client(args), Console()
    spec = loaded.spec
    if loaded.code_dir is not None:
        entrypoint = spec.get("entrypoint")
        sha256 = upload_project(api, loaded.code_dir, console,
                                entrypoint=entrypoint if isinstance(entrypoint, str) else None)
        spec["code"] = {**spec["code"], "bundle": sha256}
    apply_queue_options(spec, priority=args.priority, time_limit=args.time_limit)
    try:
        return _launch(args, api, spec, console)
    except CliError as exc:
        raise in_file_terms(exc, loaded.names) from None


def _submitted(args: argparse.Namespace) -> LoadedSpec:
    """The file given (positionally, or as the Go scheduler's --config), or a Go scheduler task from flags."""
    task_flags = [f"--{flag}" for flag in ("name", "gpus", "memory", "param") if getattr(args, flag)]
    files = [path for path in (args.spec, args.config) if path]
    if len(files) > 1:
        raise CliError("give the file once: either as an argument or as --config")
    if files and task_flags:
        raise CliError(f"{' and '.join(task_flags)} describe a task without a file: give them or {files[0]}, not both")
    if files:
        return load_spec_file(Path(files[0]))
    if not task_flags:
        raise CliError("give a JobSpec or task file (`torchyard submit job.yaml`), or a task by flags "
                       "(`torchyard submit --name \"ResNet50 Training\" --gpus 2 --memory 8192`)")
    params = dict(pair.split("=", 1) for pair in args.param)
    gpus = 1 if args.gpus is None else args.gpus
    # The Go scheduler's submit asks for GPUs of 4096 MB unless told; a task without GPUs asks for none.
    memory = args.memory if args.memory is not None else DEFAULT_TASK_MEMORY if gpus else 0
    spec, notes, names = task_spec({"name": args.name or "task", "required_gpus": gpus, "min_gpu_memory": memory,
                                    "params": params}, Path("command line"))
    return LoadedSpec(spec, None, notes, names)


PYTHON_NAME = re.compile(r"^python(3(\.[0-9]+)?)?$")


def cmd_run(args: argparse.Namespace) -> int:
    argv = list(args.argv)
    if argv[:1] == ["--"]:  # `torchyard run -- train.py ...`: the separator is not the script
        argv = argv[1:]
    # `torchyard run python train.py` (Kubetorch's `kt run python ...`): the ranks run the job's
    # Python anyway, so the interpreter named is not the script.
    if len(argv) > 1 and PYTHON_NAME.match(argv[0]):
        argv = argv[1:]
        if argv[0] == "-m":
            args.module, argv = True, argv[1:]
    if not argv:
        raise CliError("give the script to run, e.g. `torchyard run train.py --lr 0.1` (or `-m pkg.train`)")
    directory = Path(os.path.abspath(args.dir or os.curdir))
    if not directory.is_dir():
        raise CliError(f"--dir {args.dir}: not a directory")
    target = argv[0] if args.module else entrypoint_in(directory, argv[0], Path.cwd())
    spec = run_spec(
        target=target, module=args.module, args=argv[1:], directory=directory, nnodes=args.nnodes,
        nproc_per_node=args.nproc_per_node, gpus_per_node=args.gpus_per_node, name=args.name,
        env=parse_env(args.env), secret_env=secret_env_from(args.secret_env, dict(os.environ)),
        pip=args.pip, max_restarts=args.max_restarts, project=args.project, volumes=args.volume,
        launcher=None if args.framework == "ray" else args.launcher, framework=args.framework,
    )
    api, console = _client(args), Console()
    spec["code"] = {"bundle": upload_project(api, directory, console, entrypoint=None if args.module else target)}
    apply_queue_options(spec, priority=args.priority, time_limit=args.time_limit)
    return _launch(args, api, spec, console)


def cmd_jobs(args: argparse.Namespace) -> int:
    for job in _client(args).call("GET", "/api/jobs"):
        _print_job(job)
    return 0


def cmd_machines(args: argparse.Namespace) -> int:
    client = _client(args)
    machines = client.call("GET", "/api/machines")
    if args.action == "release":
        if not args.machine:
            raise CliError("torchyard machines release NAME: name the machine (or give its id)")
        found = next((m for m in machines if args.machine in (m["name"], str(m["id"]))), None)
        if found is None:
            raise CliError(f"no machine named {args.machine!r}")
        if not found.get("quarantined_at"):
            print(f"{found['name']} is not quarantined ({found['status']})")
            return 0
        released = client.call("PATCH", f"/api/machines/{found['id']}", {"quarantined": False})
        print(f"{released['name']} released from quarantine: {released['status']}")
        return 0
    for m in machines:
        caps = m.get("capabilities") or {}
        print(f"{m['id']:<4} {m['name']:<20} {m['status']:<11} {m['host']}:{m['port']}  "
              f"cpus={caps.get('cpu_count', '-')} gpus={caps.get('gpu_count', 0)}")
        if m.get("quarantined_at"):
            job = f" (job {m['quarantine_job']})" if m.get("quarantine_job") else ""
            probation = (f"; its health check may release it from {m['probation_until']}" if m.get("probation_until")
                         else "; only an operator releases it")
            print(f"     quarantined since {m['quarantined_at']}{job}: {m['quarantine_reason']}{probation}")
            print(f"     release it: torchyard machines release {m['name']}")
    return 0


def cmd_monitor(args: argparse.Namespace) -> int:
    return monitor(_client(args), Console(), worker=args.worker, refresh=args.refresh, once=args.once)


def _count_arg(text: str) -> int:
    if not text.strip().isdigit():
        raise argparse.ArgumentTypeError(f"expected a whole number, 0 or more, found {text!r}")
    return int(text)


def _param_arg(text: str) -> str:
    if "=" not in text or not text.split("=", 1)[0].strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, found {text!r}")
    return text


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0.1 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"{text!r}: seconds between redraws, 0.1 to 3600")
    return value


def cmd_queue(args: argparse.Namespace) -> int:
    return show_queue(_client(args), Console(), project=args.project, as_json=args.json)


def cmd_usage(args: argparse.Namespace) -> int:
    return show_usage(_client(args), Console(), by=args.by, since=args.since, until=args.until, bucket=args.bucket,
                      project=args.project, as_json=args.json)


def cmd_priority(args: argparse.Namespace) -> int:
    _print_job(set_priority(_client(args), args.job, args.priority))
    return 0


def queue_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--priority", metavar="low|normal|high|N",
                   help="the job's place in the queue: low, normal (default), high or an integer from -100 to 100, "
                        "up to the project's ceiling")
    p.add_argument("--time-limit", "--time_limit", dest="time_limit", metavar="DURATION",
                   help="the most the job may run (3600, 90m, 2h, 1d): it is stopped then; a job with a time limit "
                        "may start ahead of the queue when it ends before the first in line can start")


def cmd_recipes(args: argparse.Namespace) -> int:
    for recipe in _client(args).call("GET", "/api/recipes"):
        print(f"{recipe['entrypoint']:<24} {recipe['summary']}")
    return 0


def cmd_plugin_push(args: argparse.Namespace) -> int:
    push_plugin(_client(args), Path(os.path.abspath(args.dir)), Console(), name=args.name, project=args.project)
    return 0


def cmd_plugin_rm(args: argparse.Namespace) -> int:
    remove_plugin(_client(args), args.name, Console(), project=args.project)
    return 0


def cmd_plugin_list(args: argparse.Namespace) -> int:
    for line in plugin_lines(_client(args).call("GET", "/api/plugins")):
        print(line)
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from torchyard.client import sweeps

    api, console = _client(args), Console()
    if args.what in ("show", "stop", "resume"):
        if args.id is None:
            raise CliError(f"torchyard sweep {args.what} needs the sweep's id")
        path = f"/api/sweeps/{args.id}" + ("" if args.what == "show" else f"/{args.what}")
        sweep = api.call("GET" if args.what == "show" else "POST", path)
        print(sweeps.summary(sweep))
        for line in sweeps.trial_lines(sweep) if args.what == "show" else []:
            print(line)
        return 0
    if args.id is not None:
        raise CliError(f"torchyard sweep FILE takes no id (did you mean show, stop or resume {args.id}?)")
    sweep = sweeps.submit(api, Path(args.what), console)
    print(f"sweep {sweep['id']} submitted: {sweep['counts']['running']} trial(s) queued; stop it with "
          f"`torchyard sweep stop {sweep['id']}`")
    if args.detach:
        return 0
    final = sweeps.follow(api, sweep["id"], console)
    return 0 if final["status"] == "completed" else 1


def cmd_sweeps(args: argparse.Namespace) -> int:
    from torchyard.client import sweeps

    for sweep in _client(args).call("GET", "/api/sweeps"):
        print(sweeps.summary(sweep))
    return 0


def cmd_checkpoints(args: argparse.Namespace) -> int:
    checkpoints = _client(args).call("GET", f"/api/jobs/{args.job}/checkpoints")
    if not checkpoints:
        print(f"job {args.job} has no committed checkpoint")
    for c in checkpoints:
        # A memory checkpoint says which machines hold it; the store's its manifest's URI.
        holders = sorted({h for f in c["files"] for h in f.get("holders") or []})
        where = f"{c['uri']} (in memory on {', '.join(holders)})" if c.get("tier") == "memory" else c["uri"]
        print(f"step {c['step']:<8} attempt {c['attempt']:<3} world {c['world_size']:<4} "
              f"{c['total_bytes'] / 1e6:9.1f} MB  {len(c['files'])} file(s)  {where}")
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    api, console = _client(args), Console()
    if args.follow:
        # A missing job or a refused token fails here at once, not after the stream's retries.
        api.call("GET", f"/api/jobs/{args.job}")
        return follow_job(api, args.job, console, Console(stderr=True))
    page = api.call("GET", f"/api/jobs/{args.job}/logs?limit=10000")
    JobRenderer(console, args.job, live=False).events(page["events"])
    return 0


def cmd_artifacts(args: argparse.Namespace) -> int:
    return show_or_download(_client(args), args.job, Path(args.out) if args.out else None, Console())


def cmd_results(args: argparse.Namespace) -> int:
    return show_results(_client(args), args.job, Path(args.out) if args.out else None, Console())


def cmd_stacks(args: argparse.Namespace) -> int:
    from torchyard.client.stacks import show_stacks

    if not 1 <= args.timeout <= 600:
        raise CliError(f"--timeout {args.timeout:g}: seconds to wait for the nodes' answers, 1 to 600")
    return show_stacks(_client(args), args.job, Console(), timeout=args.timeout)


def cmd_stop(args: argparse.Namespace) -> int:
    _print_job(_client(args).call("POST", f"/api/jobs/{args.job}/stop"))
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    from torchyard.client.validate import validate

    if not 1 <= args.timeout <= 86400:
        raise CliError(f"--timeout {args.timeout:g}: seconds the validation job may take, 1 to 86400")
    return validate(_client(args), Console(), as_json=args.json, keep=args.keep, timeout=args.timeout)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="torchyard", description="Torchyard: distributed PyTorch on your machines.")
    sub = parser.add_subparsers(dest="command", required=True)

    agent = sub.add_parser("agent", help="run this machine's agent")
    agent.add_argument("--server", help="the Torchyard server URL: asked for the Redis URL (unless --redis-url), "
                       "and where nodes fetch the jobs' code bundles from")
    agent.add_argument("--token", help="the machine token from `POST /api/machines` (or TORCHYARD_MACHINE_TOKEN)")
    agent.add_argument("--token-file", help="read the machine token from this file (or TORCHYARD_MACHINE_TOKEN_FILE)")
    agent.add_argument("--redis-url", help="connect to this Redis directly instead of asking the server "
                       "(or TORCHYARD_REDIS_URL)")
    agent.add_argument("--ca-file", help="a certificate authority to trust beside the system's, for the server's "
                       "HTTPS and a rediss:// Redis (`torchyard-server certs` writes ca.pem; or TORCHYARD_CA_FILE)")
    agent.add_argument("--work-dir", help="where run directories live (default ~/.torchyard/agent-<id>)")
    agent.add_argument("--concurrency", type=int, default=4)
    agent.add_argument("--python", help="the Python the ranks run with: the machine's training environment "
                       "(default: the agent's own; or TORCHYARD_PYTHON)")
    agent.add_argument("--volume", action="append", default=[], metavar="NAME=PATH[,class=CLASS]",
                       help="a named host path jobs may ask for (JobSpec volumes), e.g. shared-data=/mnt/nfs/shared "
                            "(repeatable); ,class=CLASS declares its storage class, which a job's "
                            "Volume(storage_class=CLASS) asks for, e.g. shared-data=/mnt/jfs,class=juicefs-sc")
    agent.add_argument("--gpus", metavar="0,1", help="the GPUs jobs may use, by index (default: every GPU NVML "
                       "sees); with no NVML GPU here they are taken as declared")
    agent.add_argument("--models", metavar="RTX3090,RTX3090", help="with --gpus: each GPU's model, for "
                       "scheduling (default: NVML's name)")
    agent.add_argument("--memories", metavar="24576,24576", help="with --gpus: each GPU's memory in MB, for "
                       "scheduling (min_gpu_memory; default: NVML's)")
    agent.add_argument("--addr", metavar="HOST", help="the address the other machines reach this one at: the "
                       "machine's host, the master address of the jobs whose node 0 runs here (default: the host "
                       "it was registered with). The Go scheduler worker's --addr HOST:0 is taken as HOST; the "
                       "agent's one listening port is --memory-port's")
    agent.add_argument("--memory-port", type=int, default=0, metavar="PORT",
                       help="where this machine's agent serves the memory checkpoints it holds for jobs "
                            "(checkpointing.memory) to their other machines (default 0: a free port, which the "
                            "heartbeats report); open it to the job network when a firewall stands between machines")
    agent.set_defaults(func=cmd_agent)

    def api_command(name: str, func, help_text: str, parent=sub, **options: Any) -> argparse.ArgumentParser:
        p = parent.add_parser(name, help=help_text, **options)
        p.add_argument("--server", help="server URL (default $TORCHYARD_SERVER or http://127.0.0.1:8000)")
        p.add_argument("--api-token", help="API token (default $TORCHYARD_TOKEN)")
        p.set_defaults(func=func)
        return p

    def expires_option(p: argparse.ArgumentParser) -> None:
        p.add_argument("--expires-days", type=int, metavar="N", help="the token stops working after N days "
                       "(default: never)")

    login = sub.add_parser("login", help="sign in with your password and print a new API token",
                           description="Sign in (the password is asked for, or read from TORCHYARD_PASSWORD) and "
                                       "print a new API token: `export TORCHYARD_TOKEN=$(torchyard login)`.")
    login.add_argument("--server", help="server URL (default $TORCHYARD_SERVER or http://127.0.0.1:8000)")
    login.add_argument("--username", help="(asked for when not given)")
    login.set_defaults(func=cmd_login)
    login.add_argument("--name", help="the token's name (default: cli on <this host>)")
    expires_option(login)
    tokens = sub.add_parser("token", help="your API tokens: create, list, revoke")
    token_sub = tokens.add_subparsers(dest="token_command", required=True)
    token_create = api_command("create", cmd_token_create, "create an API token and print it (shown once)",
                               parent=token_sub)
    token_create.add_argument("name", help="what the token is for, e.g. laptop or CI")
    expires_option(token_create)
    api_command("list", cmd_token_list, "list your API tokens (never the tokens themselves)", parent=token_sub)
    token_revoke = api_command("revoke", cmd_token_revoke, "revoke one of your API tokens", parent=token_sub)
    token_revoke.add_argument("id", type=int, help="the token's id, from `torchyard token list`")

    run = api_command(
        "run", cmd_run, "pack this project, upload it and run a script (or -m module) on the cluster",
        usage="torchyard run [options] [-m] SCRIPT|MODULE [ARGS...]",
        description="Pack the project directory (.gitignore and .torchyardignore respected), upload it unless "
                    "the server has it, run SCRIPT (or with -m, MODULE) with torchrun on the cluster, and follow "
                    "it. Everything after SCRIPT is its own argv, passed as is.",
    )
    # torchrun's own flag names, both spellings.
    run.add_argument("--nnodes", type=nnodes_arg, default=1, metavar="N|MIN:MAX",
                     help="machines to run on (default 1), or an elastic range MIN:MAX (2:4): as many as fit, at "
                          "least MIN; the job shrinks when a machine is lost and grows back at a checkpoint")
    run.add_argument("--nproc-per-node", "--nproc_per_node", dest="nproc_per_node", type=int, default=1, metavar="P",
                     help="processes per machine (default 1)")
    run.add_argument("-m", "--module", action="store_true",
                     help="run MODULE as `python -m MODULE` (from the project), as torchrun -m does")
    run.add_argument("--launcher", choices=["torchrun", "none"], default="torchrun",
                     help="torchrun (default): --nproc-per-node ranks per machine; none: SCRIPT once per machine "
                          "as a plain process, with NODE_RANK, NNODES, MASTER_ADDR, MASTER_PORT and TORCHYARD_PEERS")
    run.add_argument("--framework", choices=["pytorch", "ray"], default="pytorch",
                     help="ray: a Ray cluster over the machines (a head on the first, workers joining it; Ray from "
                          "the project's requirements.txt or --pip ray), SCRIPT its driver on the head")
    run.add_argument("--max-restarts", "--max_restarts", dest="max_restarts", type=int, metavar="N",
                     help="relaunches from the last checkpoint before the job fails (server default 3)")
    run.add_argument("--gpus-per-node", "--gpus_per_node", dest="gpus_per_node", type=int, metavar="G",
                     help="GPUs per machine (default 0)")
    run.add_argument("--name", help="job name (default: the script and the project directory's name)")
    run.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                     help="environment variable of every rank (repeatable)")
    run.add_argument("--secret-env", action="append", default=[], metavar="NAME",
                     help="pass NAME from your environment to every rank as a secret: stored encrypted, "
                          "never shown by the API, masked in logs (repeatable)")
    run.add_argument("--project", help="the project to run in (default: the server's default project)")
    run.add_argument("--pip", action="append", default=[], metavar="REQUIREMENT",
                     help="extra package to install with the project's requirements.txt (repeatable)")
    run.add_argument("--dir", help="the project directory to pack (default: the current directory)")
    run.add_argument("--volume", action="append", default=[], metavar="NAME[:MOUNT_PATH][:ACCESS_MODE]",
                     help="a volume the machines declare, e.g. shared-data:data (a link in the working directory; "
                          "$TORCHYARD_VOLUME_SHARED_DATA is its path), access mode ReadWriteMany (default) or "
                          "ReadWriteOnce (repeatable)")
    run.add_argument("--detach", action="store_true", help="return once submitted instead of following the job")
    queue_options(run)
    run.add_argument("argv", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)

    submit = api_command("submit", cmd_submit, "submit a JobSpec (YAML or JSON file), or a Go scheduler task (a "
                         "file with name, required_gpus, min_gpu_memory, params; or the same by flags), and follow "
                         "the job")
    submit.add_argument("spec", nargs="?", help="the JobSpec or task file")
    submit.add_argument("--config", metavar="FILE", help="the same file, as the Go scheduler's submit takes it")
    submit.add_argument("--name", help="a task by flags (the Go scheduler's): its name")
    submit.add_argument("--gpus", type=_count_arg, metavar="N", help="a task by flags: the GPUs it needs (default 1)")
    submit.add_argument("--memory", type=_count_arg, metavar="MB", help=f"a task by flags: the memory each GPU "
                        f"needs (default {DEFAULT_TASK_MEMORY} with GPUs, as the Go scheduler's)")
    submit.add_argument("--param", action="append", default=[], type=_param_arg, metavar="KEY=VALUE",
                        help="a task by flags: one of its params (repeatable): model and dataset pick the built-in "
                             "recipe, the others are its hyperparameters")
    queue_options(submit)
    following = submit.add_mutually_exclusive_group()
    following.add_argument("--follow", action="store_true", help="follow the job until it ends (the default)")
    following.add_argument("--detach", action="store_true", help="return once submitted instead of following the job")
    api_command("jobs", cmd_jobs, "list jobs")
    queue = api_command("queue", cmd_queue, "the queued jobs in order: each one's place, priority and why it waits")
    queue.add_argument("--project", help="only this project's jobs")
    queue.add_argument("--json", action="store_true", help="the API's answer as JSON")
    usage = api_command("usage", cmd_usage, "GPU- and process-hours per project, user or machine")
    usage.add_argument("--by", choices=["project", "user", "machine"], default="project")
    usage.add_argument("--since", help="ISO date-time, date or an age: 24h, 7d, 2w (default 7d)")
    usage.add_argument("--until", help="as --since (default now)")
    usage.add_argument("--bucket", choices=["hour", "day"], help="also GPU-hours per hour or day")
    usage.add_argument("--project", help="only this project's usage")
    usage.add_argument("--json", action="store_true", help="the API's answer as JSON")
    priority = api_command("priority", cmd_priority, "change a queued or running job's priority (audited)")
    priority.add_argument("job", type=int)
    priority.add_argument("priority", metavar="low|normal|high|N")
    machines = api_command("machines", cmd_machines, "list machines; `machines release NAME` ends a quarantine",
                           description="List the machines, a quarantined one with why and since when. "
                                       "`torchyard machines release NAME` releases a quarantined machine: the "
                                       "planner places nodes there again.")
    machines.add_argument("action", nargs="?", choices=["release"], help="release NAME from its quarantine")
    machines.add_argument("machine", nargs="?", help="the machine's name or id (with release)")
    watch = api_command("monitor", cmd_monitor, "a live view of the machines, their GPUs and the task on each "
                        "(Ctrl-C to quit)")
    watch.add_argument("--worker", metavar="NAME", help="only this machine (its name or id)")
    watch.add_argument("--refresh", type=_seconds, default=1.0, metavar="SECONDS",
                       help="seconds between redraws (default 1)")
    watch.add_argument("--once", action="store_true", help="print the view once and exit")
    stacks = api_command("stacks", cmd_stacks, "every rank's Python stack right now (py-spy, read from outside)",
                         description="Print where every rank of a running job is at this moment: each running "
                                     "node's agent reads its ranks' Python stacks from outside (py-spy), without "
                                     "pausing them. For a job that looks slow rather than dead.")
    stacks.add_argument("job", type=int)
    stacks.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS",
                        help="how long to wait for every node's answer (default 30)")
    api_command("recipes", cmd_recipes, "list the built-in recipes a job can run")
    plugins = sub.add_parser("plugin", help="plugins (TransformerLab's): push a plugin directory, list, remove")
    plugin_sub = plugins.add_subparsers(dest="plugin_command", required=True)
    plugin_push = api_command(
        "push", cmd_plugin_push, "upload a plugin directory and register it", parent=plugin_sub,
        description="Read DIR's torchyard-plugin.json (or TransformerLab's index.json), upload DIR as a bundle "
                    "(nothing when the server has it) and register the plugin: TransformerLab's routes then take it as "
                    "plugin_name. A directory without a manifest needs --name; its entrypoint is main.py.")
    plugin_push.add_argument("dir", metavar="DIR", help="the plugin's directory")
    plugin_push.add_argument("--name", help="the plugin's name (instead of the manifest's)")
    plugin_push.add_argument("--project", help="the project it belongs to (default: the server's default project)")
    api_command("list", cmd_plugin_list, "list the plugins you can run: yours, your projects', the built-in ones",
                parent=plugin_sub)
    plugin_rm = api_command("rm", cmd_plugin_rm, "remove a registered plugin (its owner or a project admin)",
                            parent=plugin_sub)
    plugin_rm.add_argument("name", metavar="NAME", help="the plugin's name")
    plugin_rm.add_argument("--project", help="its project (needed when plugins of that name are in several)")
    sweep = api_command("sweep", cmd_sweep, "run a sweep file (a search over hyperparameters, each trial a job) and "
                        "follow it; or show, stop or resume one: `torchyard sweep stop 3`")
    sweep.add_argument("what", metavar="FILE|show|stop|resume", help="a sweep file (YAML or JSON), or an action")
    sweep.add_argument("id", type=int, nargs="?", help="the sweep's id, for show, stop and resume")
    sweep.add_argument("--detach", action="store_true", help="return once submitted instead of following it")
    api_command("sweeps", cmd_sweeps, "list the sweeps you may see, newest first")
    checkpoints = api_command("checkpoints", cmd_checkpoints, "list a job's committed checkpoints, newest first")
    checkpoints.add_argument("job", type=int)
    logs = api_command("logs", cmd_logs, "print a job's logs")
    logs.add_argument("job", type=int)
    logs.add_argument("--follow", action="store_true", help="follow the job live until it ends")
    artifacts = api_command("artifacts", cmd_artifacts, "list a job's artifacts, or download them with --out")
    artifacts.add_argument("job", type=int)
    artifacts.add_argument("--out", metavar="DIR", help="download into DIR/attempt-<a>/node-<r>/<path>")
    results = api_command("results", cmd_results, "a function job's per-rank return values (or the remote "
                          "traceback of a rank that raised)")
    results.add_argument("job", type=int)
    results.add_argument("--out", metavar="DIR", help="save each rank's pickled value as DIR/rank-<R>.pkl")
    stop = api_command("stop", cmd_stop, "stop a job")
    stop.add_argument("job", type=int)
    check = api_command("validate", cmd_validate, "check the installation end to end: server, database, Redis, "
                        "storage, every agent, and a 2-node job through a checkpoint, a killed rank and its "
                        "recovery (exit 0 only when every check passed)")
    check.add_argument("--json", action="store_true", help="the checks as JSON instead of a table")
    check.add_argument("--keep", action="store_true", help="keep the validation job (its logs and checkpoints) "
                       "when every check passed; a failed validation always keeps it")
    check.add_argument("--timeout", type=float, default=300.0, metavar="SECONDS",
                       help="the most the validation job may take, from its submission (default 300)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except CliError as exc:
        print(f"torchyard: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
