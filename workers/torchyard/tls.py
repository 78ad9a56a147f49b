"""TLS for what an agent reaches across the network: Redis (`rediss://`) and the server (`https://`),
with a private authority's certificate (`torchyard-server certs`) trusted beside the system's.

redis-py, kombu (Celery's broker) and channels_redis all read `ssl_ca_certs` and `ssl_cert_reqs`
from a `rediss://` URL's query, so a URL carries its TLS settings to every process that gets it (the
agent's Celery worker, its node supervisors). One trap is closed here: kombu connects to a
`rediss://` URL without `ssl_cert_reqs` with verification off (CERT_NONE, with a warning), where
redis-py verifies; secure_redis_url() writes `ssl_cert_reqs=required` into such a URL, so every
client verifies the server's certificate.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

CA_FILE_NAME = "ca.pem"


def is_tls(redis_url: str) -> bool:
    return urlsplit(redis_url).scheme == "rediss"


def secure_redis_url(redis_url: str, ca_file: str | Path | None = None) -> str:
    """A `rediss://` URL that verifies the server: `ssl_cert_reqs=required` unless the URL says
    otherwise, and `ssl_ca_certs=ca_file` unless it names one. Other URLs come back unchanged."""
    parts = urlsplit(redis_url)
    if parts.scheme != "rediss":
        return redis_url
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    query.setdefault("ssl_cert_reqs", "required")
    if ca_file:
        query.setdefault("ssl_ca_certs", str(ca_file))
    return urlunsplit(parts._replace(query=urlencode(query)))


def store_ca(work_dir: Path, pem: str) -> Path:
    """Write the authority's certificate the server handed out to WORK_DIR/ca.pem (replaced when it
    changed) and return its path."""
    if "BEGIN CERTIFICATE" not in pem:
        raise ValueError("the server's ca_pem is not a PEM certificate")
    work_dir.mkdir(parents=True, exist_ok=True)
    path = work_dir / CA_FILE_NAME
    if not path.exists() or path.read_text() != pem:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(pem)
        tmp.replace(path)
    return path


def https_context(ca_file: str | Path | None) -> ssl.SSLContext | None:
    """For urllib: the system's authorities plus `ca_file` (None without one: urllib's default)."""
    if not ca_file:
        return None
    context = ssl.create_default_context()
    context.load_verify_locations(cafile=str(ca_file))
    return context
