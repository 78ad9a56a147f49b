"""`torchyard agent --addr HOST` (the Go scheduler's worker --addr): what it takes and refuses. The
heartbeats carrying it set the machine's host: tests/machines/test_machine_heartbeats.py."""

from __future__ import annotations

import pytest
from torchyard import protocol
from torchyard.agent.main import parse_addr
from torchyard.cli import main as cli


@pytest.mark.parametrize(("addr", "host"), [
    ("10.0.0.5", "10.0.0.5"), ("10.0.0.5:0", "10.0.0.5"), ("gpu-box.lab", "gpu-box.lab"), ("localhost:0", "localhost"),
    ("[fd00::5]:0", "fd00::5"), ("fd00::5", "fd00::5"),
])
def test_addr_takes_a_host_and_the_go_workers_any_port(addr, host):
    assert parse_addr(addr) == host


def test_a_port_or_a_malformed_host_is_refused_before_anything_connects(capsys):
    token = protocol.make_machine_token(7, "s" * 32)
    assert cli(["agent", "--token", token, "--addr", "10.0.0.5:50052", "--redis-url", "redis://127.0.0.1:1/0"]) == 2
    assert capsys.readouterr().err.strip() == (
        "torchyard: --addr 10.0.0.5:50052: the agent connects out to the server and the jobs' ports come from the "
        "server's range; its one listening port is set with --memory-port: give --addr 10.0.0.5 without :50052")
    assert cli(["agent", "--token", token, "--addr", "gpu box", "--redis-url", "redis://127.0.0.1:1/0"]) == 2
    assert capsys.readouterr().err.strip() == "torchyard: --addr gpu box: 'gpu box' is not a host name or an IP address"
