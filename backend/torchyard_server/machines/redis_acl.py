"""Each machine's agent gets a Redis user of its own, `agent-<id>`, allowed only what its Celery
queue and its event streams need (README "Machine tokens and what an agent can do").

On when Torchyard started Redis itself (embedded mode: its default user has a password), or where
TORCHYARD_REDIS_AGENT_ACL is on for a Redis of your own whose REDIS_URL user may run ACL SETUSER.
Off, agents get TORCHYARD_AGENT_REDIS_URL (else REDIS_URL) as it is.

A user's password is derived from the machine's token hash with SECRET_KEY: nothing more is
stored, it changes when the token rotates, and only the server can compute it. Users live in Redis
only (a restarted Redis has none), so they are written again, idempotently: when a machine is
registered or its token rotates, when its agent fetches /api/agent/config, and by the controller's
periodic sync (`sync_agent_users`), which also removes the users of removed machines.
"""

from __future__ import annotations

import hashlib
import logging
from functools import cache
from urllib.parse import quote, urlsplit, urlunsplit

import redis
from django.conf import settings
from django.utils.crypto import salted_hmac
from torchyard import protocol

from .models import Machine

log = logging.getLogger(__name__)
USER_PREFIX = "agent-"
# kombu's Redis transport names (kombu/transport/redis.py): the separator of a queue's priority
# lists and the remote-control exchanges (their broadcasts go to the channel /<db>.celery.pidbox).
PRIORITY_SEP = "\x06\x16"
PIDBOX_EXCHANGES = ("celery.pidbox", "reply.celery.pidbox")
# What a connection does first (redis-py's handshake; SELECT for a database other than 0).
# Not +@connection: that category has CLIENT KILL, CLIENT LIST and CLIENT PAUSE.
HANDSHAKE = ("auth", "hello", "ping", "select", "quit", "client|setinfo")
# What its Celery worker and event publishers send, as MONITOR showed while an agent served
# launches, stops, pings and its shutdown (Celery 5.7, kombu 5.7); keys limit them (rules()).
COMMANDS = (
    # Its queue (BRPOP; LPUSH puts back what it took and could not finish) and ping replies;
    # DEL and SREM when its mailbox goes at shutdown.
    "brpop", "rpop", "lpush", "llen", "del",
    # kombu's acknowledgement emulation: the unacked hash, its index and mutex (restoring what
    # stayed unacknowledged too long uses WATCH/MULTI/EXEC).
    "hset", "hget", "hdel", "zadd", "zrem", "zrange", "set", "get", "watch", "unwatch", "multi", "exec",
    "discard",
    # Queue bindings (sets), and kombu's scripts that refresh and sweep the expiring ones.
    "sadd", "srem", "smembers", "exists", "time", "zrangebyscore", "evalsha", "script|load", "script|exists",
    # Its event streams, their length and whether ingest reads them (its consumer group): the
    # supervisors' flow control waits while ingest is behind.
    "xadd", "xlen", "xinfo|groups",
    # Remote control (ping, shutdown of a worker): broadcasts arrive over pub/sub.
    "psubscribe", "punsubscribe",
)


def enabled() -> bool:
    return settings.REDIS_AGENT_ACL


def username(machine_id: int) -> str:
    return f"{USER_PREFIX}{machine_id}"


def password(machine: Machine) -> str:
    """Derived from the machine's current token hash: rotating the token changes it."""
    return salted_hmac("torchyard.agent-redis", f"{machine.pk}:{machine.token_hash}").hexdigest()


def agent_url(machine: Machine) -> str:
    """The Redis URL handed to the machine's agent: its own user when agent ACLs are on."""
    base = settings.AGENT_REDIS_URL
    if not enabled():
        return base
    parts = urlsplit(base)
    host = parts.netloc.rpartition("@")[2]
    netloc = f"{quote(username(machine.pk), safe='')}:{quote(password(machine), safe='')}@{host}"
    return urlunsplit(parts._replace(netloc=netloc))


def _db(url: str) -> int:
    path = urlsplit(url).path.strip("/")
    return int(path) if path.isdigit() else 0


def rules(machine_id: int, *, db: int, commands: tuple[str, ...]) -> list[str]:
    """ACL SETUSER rules for one machine (without its password): its queue, its own unacked keys,
    its remote-control mailbox, its streams, the broadcast channel, nothing else."""
    queue = protocol.machine_queue(machine_id)
    keys = [
        f"~{queue}", f"~{queue}{PRIORITY_SEP}*",
        *(f"~{key}" for key in protocol.machine_unacked_keys(machine_id).values()),
        # Its worker's mailbox (`-n agent-<id>@host`), and the replies it sends to whoever pinged.
        f"~{username(machine_id)}@*.celery.pidbox*", "%W~*.reply.celery.pidbox",
        # kombu's binding bookkeeping: its own queue's, and the remote-control exchanges' (its
        # mailbox joins and leaves them; scripts refresh and sweep those with an expiry).
        f"~_kombu.binding.{queue}", f"~_kombu.binding_permanent.{queue}", "~_kombu.binding_deadlines",
        *(f"~_kombu.binding{kind}.{exchange}" for exchange in PIDBOX_EXCHANGES for kind in ("", "_permanent")),
        f"~{protocol.machine_event_stream(machine_id)}", f"~{protocol.machine_liveness_stream(machine_id)}",
    ]
    return ["resetkeys", "resetchannels", "-@all", *(f"+{c}" for c in commands), *keys,
            f"&/{db}.celery.pidbox"]


@cache
def _client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=10, socket_connect_timeout=5)


def client() -> redis.Redis:
    """The server's own connection (REDIS_URL's user, which may manage users)."""
    return _client(settings.REDIS_URL)


@cache
def _known_commands(url: str) -> tuple[str, ...]:
    """The allowed commands this server knows: ACL SETUSER refuses a rule naming an unknown one,
    and CLIENT SETINFO (which redis-py sends on connecting) came with Redis 7.2."""
    version = tuple(int(part) for part in str(_client(url).info("server")["redis_version"]).split(".")[:2])
    return tuple(c for c in (*HANDSHAKE, *COMMANDS) if c != "client|setinfo" or version >= (7, 2))


def ensure_user(machine: Machine) -> None:
    """Create or update the machine's user (idempotent). Open connections stay open: Redis checks
    a password when a client authenticates."""
    if not enabled():
        return
    url = settings.REDIS_URL
    _client(url).execute_command(
        "ACL", "SETUSER", username(machine.pk), "on", "resetpass", f">{password(machine)}",
        *rules(machine.pk, db=_db(settings.AGENT_REDIS_URL), commands=_known_commands(url)))


def try_ensure_user(machine: Machine) -> None:
    """ensure_user where Redis trouble must not fail the caller: the agent's config request and
    the periodic sync write the user again."""
    try:
        ensure_user(machine)
    except redis.RedisError as exc:
        log.warning("could not write the Redis user of machine %s (written again later): %s", machine.pk, exc)


def _user_machine(name: bytes | str) -> int | None:
    text = name.decode() if isinstance(name, bytes) else name
    tail = text.removeprefix(USER_PREFIX)
    return int(tail) if text.startswith(USER_PREFIX) and tail.isdigit() else None


def _queue_is_empty(conn: redis.Redis, machine_id: int) -> bool:
    queue = protocol.machine_queue(machine_id)
    pipe = conn.pipeline(transaction=False)
    for key in (queue, *(f"{queue}{PRIORITY_SEP}{p}" for p in (3, 6, 9))):
        pipe.llen(key)
    return not any(pipe.execute())


def _has_password(conn: redis.Redis, user: str, secret: str) -> bool:
    """Redis shows a user's passwords as their SHA-256."""
    hashes = (conn.acl_getuser(user) or {}).get("passwords") or []
    return isinstance(hashes, list) and hashlib.sha256(secret.encode()).hexdigest() in hashes


def _connected(conn: redis.Redis, user: str) -> bool:
    return any(c.get("user") == user for c in conn.client_list())


def remove_user(machine_id: int) -> None:
    """Delete a removed machine's user, which closes its connections, and what its queue still holds."""
    conn = client()
    conn.acl_deluser(username(machine_id))
    queue = protocol.machine_queue(machine_id)
    conn.delete(queue, *(f"{queue}{PRIORITY_SEP}{p}" for p in (3, 6, 9)),
                *protocol.machine_unacked_keys(machine_id).values())


def sync_agent_users() -> dict[str, list[int]]:
    """Make Redis's agent users match the machines: write those missing or with another password
    (a restarted Redis, a rotation while Redis was away); remove those of removed machines once
    their agent took what was queued for it (the stops of its nodes, then its shutdown task) or
    holds no connection to take it with."""
    if not enabled():
        return {"written": [], "removed": []}
    conn = client()
    machines = {m.pk: m for m in Machine.objects.only("pk", "token_hash")}
    existing = {mid for mid in map(_user_machine, conn.acl_users()) if mid is not None}
    written, removed = [], []
    for machine_id, machine in machines.items():
        if machine_id in existing and _has_password(conn, username(machine_id), password(machine)):
            continue
        ensure_user(machine)
        written.append(machine_id)
    for machine_id in existing - machines.keys():
        if _queue_is_empty(conn, machine_id) or not _connected(conn, username(machine_id)):
            remove_user(machine_id)
            removed.append(machine_id)
    if written or removed:
        log.info("agent Redis users written for machines %s, removed for %s", written, removed)
    return {"written": written, "removed": removed}
