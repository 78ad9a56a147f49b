"""Kubetorch's `kubetorch.distributed`, for code that moves over with its import changed:
`from torchyard.distributed import pod_ips`.

    ips = pod_ips()                                         # every node of the job, once all are up
    ips = pod_ips(quorum_workers=4, quorum_timeout=60)      # as soon as 4 are

The answer comes from the node's own supervisor (the SDK's `peers`, torchyard/sdk/peers.py), never
from the server, DNS or Kubernetes. Imports only the standard library (no torch), and only the
training side imports it: the agent and the supervisor never do.
"""

from __future__ import annotations

from torchyard.sdk.peers import PeersTimeout, on_membership_change, peers, pod_ips

__all__ = ["PeersTimeout", "on_membership_change", "peers", "pod_ips"]
