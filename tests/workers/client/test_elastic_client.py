"""Elastic node ranges from the client side: `torchyard run --nnodes 2:4` and `workers=(2, 4)`
become the JobSpec's resources.nodes "MIN:MAX" (the server checks the numbers)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import torchyard as ty
from torchyard import cli
from torchyard.client.specfile import nnodes_arg, run_spec
from torchyard.functions.remote import FunctionError


def parse(*argv: str) -> argparse.Namespace:
    return cli.build_parser().parse_args(["run", *argv])


@pytest.mark.parametrize("text, value", [("2", 2), ("2:4", "2:4"), (" 02:4 ", "2:4"), ("0", 0), ("3:2", "3:2")])
def test_nnodes_takes_a_count_or_a_range_as_torchrun_does(text, value):
    assert nnodes_arg(text) == value
    assert parse("--nnodes", text, "train.py").nnodes == value


@pytest.mark.parametrize("text", ["two", "2:", ":4", "2:4:6", "-1", "2.5"])
def test_nnodes_that_is_neither_is_refused_by_the_parser(text, capsys):
    with pytest.raises(SystemExit):
        parse("--nnodes", text, "train.py")
    assert "--nnodes" in capsys.readouterr().err


def test_a_range_goes_into_the_spec_as_the_server_takes_it(tmp_path: Path):
    spec = run_spec(target="train.py", module=False, args=[], directory=tmp_path, nnodes="2:4", nproc_per_node=1)
    assert spec["resources"] == {"nodes": "2:4", "procs_per_node": 1}


def train() -> None:
    pass


def test_the_function_api_takes_a_range_of_workers():
    spec = ty.fn(train).distribute(workers=(2, 4)).spec(code="c", payload="p")
    assert spec["resources"]["nodes"] == "2:4"
    assert ty.fn(train).distribute(workers=[1, 3]).spec(code="c", payload="p")["resources"]["nodes"] == "1:3"
    assert ty.fn(train).distribute(workers=2).spec(code="c", payload="p")["resources"]["nodes"] == 2


@pytest.mark.parametrize("workers", [(0, 2), (3, 2), (1, 2, 3), (1.0, 2), (True, 2), "2:4"])
def test_a_bad_range_fails_where_it_is_written(workers):
    with pytest.raises(FunctionError, match="workers="):
        ty.fn(train).distribute(workers=workers)
