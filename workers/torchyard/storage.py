"""The S3 client every part of a machine shares: the SDK's checkpoint store and line shards, the
node supervisor's bundle downloads and output uploads.

Standard library only at import: boto3 (the `s3` extra) is imported when a client is asked for, so
nothing that never touches S3 needs it installed.
"""

from __future__ import annotations

import os
from typing import Any


def s3_client() -> Any:
    """A boto3 S3 client for S3_ENDPOINT_URL / AWS_ENDPOINT_URL (path-style), credentials from AWS_*.

    The Rust coordinator's names work too (S3_ENDPOINT, S3_ACCESS_KEY, S3_SECRET_KEY), for
    checkpoints as for its shards, where the standard ones are not set."""
    import boto3
    from botocore.config import Config

    env = os.environ.get
    endpoint = env("S3_ENDPOINT_URL") or env("AWS_ENDPOINT_URL") or env("S3_ENDPOINT") or None
    keys = {}
    if not env("AWS_ACCESS_KEY_ID") and env("S3_ACCESS_KEY"):
        keys = {"aws_access_key_id": env("S3_ACCESS_KEY"), "aws_secret_access_key": env("S3_SECRET_KEY")}
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    config = Config(
        signature_version="s3v4",
        s3={"addressing_style": "path"},
        retries={"max_attempts": 3, "mode": "standard"},
        connect_timeout=5,
        read_timeout=120,
        # Self-hosted S3 servers do not all know the newer default CRC headers; sha256 covers us.
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
    )
    return boto3.client("s3", endpoint_url=endpoint, region_name=region, config=config, **keys)
