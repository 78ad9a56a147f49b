"""The built-in datasets a JobSpec names: digits read from the scikit-learn wheel (no download), and
a node without scikit-learn told how to install it instead of a bare ImportError."""

from __future__ import annotations

import os
import subprocess
import sys

import torch
from sdk_support import WORKERS
from torchyard.sdk import datasets


def test_digits_are_the_1797_images_scaled_to_unit_range_with_ten_labels():
    inputs, labels = datasets.load_digits()
    assert inputs.shape == (1797, 64) and inputs.dtype == torch.float32
    assert inputs.min().item() == 0.0 and inputs.max().item() == 1.0
    assert labels.dtype == torch.int64 and sorted(labels.unique().tolist()) == list(range(10))


def test_the_recipe_on_a_node_without_scikit_learn_names_the_install_command(tmp_path):
    # sys.modules[name] = None makes `import sklearn` fail as it does where it is not installed.
    code = ("import sys; sys.modules['sklearn'] = None; from torchyard.examples import mlp_ddp; "
            "sys.exit(mlp_ddp.main(['--dataset', 'digits', '--steps', '1']))")
    result = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(WORKERS)},
                            cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert ("rank 0: dataset 'digits' is read from scikit-learn, which is not installed for this Python; "
            "install it on every node: pip install 'torchyard[datasets]'") in result.stderr


def test_a_recipe_refuses_a_dataset_it_does_not_train_on(tmp_path):
    code = "from torchyard.examples import mlp_fsdp; mlp_fsdp.main(['--dataset', 'digits', '--steps', '1'])"
    result = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(WORKERS)},
                            cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "this recipe trains on synthetic, not 'digits'" in result.stderr
