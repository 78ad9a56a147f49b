"""`torchyard agent --gpus 0,1 --models RTX3090,RTX3090 --memories 24576,24576` (the Go scheduler's worker):
the declaration parsed, checked against what NVML sees, and reported for scheduling. NVML's answer
is the one thing faked here (a list of GPUs as `_gpus` reads them): this machine has no GPU."""

from __future__ import annotations

import pytest
from torchyard import cli
from torchyard.agent.capabilities import (
    GpuDeclaration,
    capabilities,
    check_declaration,
    declared_gpus,
    load,
    parse_gpu_declaration,
)

A100S = [{"index": 0, "name": "NVIDIA A100-SXM4-80GB", "memory_mb": 81920},
         {"index": 1, "name": "NVIDIA A100-SXM4-80GB", "memory_mb": 81920}]
RTX = [{"index": 0, "name": "NVIDIA GeForce RTX 3090", "memory_mb": 24576},
       {"index": 1, "name": "NVIDIA GeForce RTX 3090", "memory_mb": 24576},
       {"index": 2, "name": "NVIDIA GeForce RTX 3090", "memory_mb": 24576}]


def test_the_seeds_flags_declare_indices_models_and_memories():
    assert parse_gpu_declaration("0,1", "RTX3090,RTX3090", "24576,24576") == GpuDeclaration(
        (0, 1), ("RTX3090", "RTX3090"), (24576, 24576))
    assert parse_gpu_declaration(" 2 , 3 ") == GpuDeclaration((2, 3))
    assert parse_gpu_declaration(None) is None


@pytest.mark.parametrize(("flags", "message"), [
    (("0,x", None, None), "--gpus 0,x: 'x' is not a GPU index"),
    (("0,,1", None, None), "--gpus 0,,1: a comma-separated list with no empty item"),
    (("1,1", None, None), "--gpus 1,1: a GPU is listed twice"),
    (("0,1", "RTX3090", None), "--models: 1 given for 2 GPU(s) in --gpus 0,1; give one per GPU"),
    (("0", None, "24GB"), "--memories 24GB: '24GB' is not a memory size in MB"),
    ((None, "RTX3090", None), "--models needs --gpus"),
    ((None, None, "24576"), "--memories needs --gpus"),
])
def test_a_malformed_declaration_names_the_flag(flags, message):
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        parse_gpu_declaration(*flags)


def test_declaring_a_gpu_nvml_does_not_see_is_refused_and_none_is_checked_without_nvml():
    with pytest.raises(ValueError) as refused:
        check_declaration(GpuDeclaration((0, 3)), A100S)
    assert str(refused.value) == ("--gpus: this machine has no GPU 3; NVML sees 0 (NVIDIA A100-SXM4-80GB, 81920 MB), "
                                  "1 (NVIDIA A100-SXM4-80GB, 81920 MB)")
    check_declaration(GpuDeclaration((0, 1)), A100S)
    check_declaration(GpuDeclaration((5,)), [])


def test_a_restriction_schedules_only_the_listed_gpus_as_nvml_sees_them():
    gpus, warnings = declared_gpus(GpuDeclaration((0, 2)), RTX)
    assert gpus == [RTX[0], RTX[2]] and warnings == []
    # The seed's own declaration on RTX 3090s: NVML's longer name is the same model.
    gpus, warnings = declared_gpus(GpuDeclaration((0, 1), ("RTX3090", "RTX3090"), (24576, 24576)), RTX)
    assert [g["name"] for g in gpus] == ["RTX3090", "RTX3090"] and warnings == []


def test_declared_values_win_for_scheduling_and_every_mismatch_is_a_warning():
    gpus, warnings = declared_gpus(GpuDeclaration((0, 1), ("RTX3090", "A100"), (24576, 81000)), A100S)
    assert gpus == [{"index": 0, "name": "RTX3090", "memory_mb": 24576}, {"index": 1, "name": "A100", "memory_mb": 81000}]
    assert warnings == ["GPU 0: declared RTX3090, NVML sees NVIDIA A100-SXM4-80GB",
                        "GPU 0: declared 24576 MB, NVML sees 81920 MB",
                        "GPU 1: declared 81000 MB, NVML sees 81920 MB"]


def test_without_nvml_the_declared_gpus_are_taken_as_declared_with_a_warning(tmp_path):
    declaration = GpuDeclaration((0, 1), ("RTX3090", "RTX3090"), (24576, 24576))
    reported = capabilities(str(tmp_path), None, declaration)
    assert reported["gpus"] == [{"index": 0, "name": "RTX3090", "memory_mb": 24576},
                                {"index": 1, "name": "RTX3090", "memory_mb": 24576}]
    assert (reported["gpu_count"], reported["gpu_memory"], reported["gpus_declared"]) == (2, 49152, True)
    assert reported["gpus_detected"] == []
    assert reported["gpu_warnings"] == ["NVML sees no GPU here: GPUs 0, 1 scheduled as declared"]
    assert load(declaration)["gpu_usage"] == [0.0, 0.0]
    # No declaration: NVML's GPUs (none here), and nothing about declarations.
    plain = capabilities(str(tmp_path))
    assert plain["gpus"] == [] and "gpu_warnings" not in plain and load()["gpu_usage"] == []


def test_the_agent_command_refuses_a_bad_declaration_before_connecting(capsys):
    code = cli.main(["agent", "--token", "9999.not-a-real-secret-at-all", "--redis-url", "redis://127.0.0.1:1/0",
                     "--gpus", "0,1", "--memories", "24576"])
    assert code == 2
    assert capsys.readouterr().err == ("torchyard: --memories: 1 given for 2 GPU(s) in --gpus 0,1; "
                                       "give one per GPU\n")
