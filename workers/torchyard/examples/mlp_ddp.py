"""Torchyard's smallest recipe: an MLP learning a fixed random teacher network, or classifying
scikit-learn's handwritten digits, with DDP.

Runs unchanged under plain ``python mlp_ddp.py``, under ``torchrun --nproc-per-node 2 mlp_ddp.py``
and under Torchyard (which adds the job config, the event socket and the checkpoint store).

    --steps N              total optimizer steps (default: the job's epochs, else 300)
    --step-sleep SECONDS   extra pause per step, to make a tiny job last (default 0)
    --checkpoint-every N   save every N steps (default: the job's checkpointing.every_n_steps when
                           checkpointing is enabled, else never); 0 disables
    --dataset NAME         synthetic (the teacher's endless random batches) or digits (1,797 8x8
                           images, 1,500 to train on, 297 held out; needs scikit-learn) (default:
                           the job's dataset, else synthetic)

Hyperparameters (the job's, else the defaults below): batch_size, lr (or learning_rate), hidden,
input_dim, optimizer (adam, or sgd or adamw), momentum (sgd's), weight_decay, and epochs: that many
passes over the data instead of --steps. An epoch of digits is its 1,500 training images; one of
synthetic data is dataset_size samples (10,000 unless given), which every epoch sees again; without
epochs or dataset_size synthetic data is endless. Anything else is refused by name.

The job's gradient compression (its ``compression`` section) applies through ``sdk.wrap_ddp``; the
bytes each rank sends per step are reported next to the loss.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

try:
    from torchyard import sdk
except ImportError:  # a source checkout run as a plain file: workers/ holds the package
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from torchyard import sdk
import torch
import torch.nn.functional as F
from torch import nn
from torchyard import recipe_optimizer, recipe_params

RECIPE = "examples/mlp_ddp.py"
DEFAULTS = {"batch_size": recipe_params.DEFAULT_BATCH[RECIPE], "lr": 0.01, "hidden": 128, "input_dim": 32}
TEACHER_SEED = 1234
DATASETS = ("synthetic", "digits")
# The digits the model never trains on (the file's last 297), for the evaluation loss and accuracy.
DIGITS_HELD_OUT = 297


def parse_args(argv: list[str] | None = None, datasets: tuple[str, ...] = DATASETS) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sdk.add_training_arguments(parser, steps=None, log_every=50,
                               steps_help=f"total optimizer steps (default: the job's epochs, else {recipe_params.DEFAULT_STEPS})")
    parser.add_argument("--dataset", default=sdk.datasets.selected("synthetic"),
                        help=f"what to train on: {', '.join(datasets)} (default: the job's dataset, else synthetic)")
    args = parser.parse_args(argv)
    if args.dataset not in datasets:  # the job's dataset is the default, which argparse never checks
        parser.error(f"this recipe trains on {' or '.join(datasets)}, not {args.dataset!r}")
    return args


class MLP(nn.Module):
    def __init__(self, input_dim: int, hidden: int, outputs: int = 1) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(input_dim, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, outputs),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class SyntheticData:
    """Batches from a fixed teacher; each (rank, step) gets its own reproducible batch, so a resumed
    run sees the data it would have seen. With a `sampler` (sdk.GlobalSampler), each sample is its
    own by global index instead: a run resumed at another world size (an elastic job that shrank or
    grew) goes on at the very sample the checkpoint recorded."""

    outputs = 1
    loss = staticmethod(F.mse_loss)

    def __init__(self, input_dim: int, batch_size: int, seed: int, rank: int, device,
                 sampler: sdk.GlobalSampler | None = None) -> None:
        teacher = torch.Generator().manual_seed(TEACHER_SEED)
        self.w1 = torch.randn(input_dim, 16, generator=teacher) / input_dim**0.5
        self.w2 = torch.randn(16, 1, generator=teacher)
        self.input_dim, self.batch_size, self.device = input_dim, batch_size, device
        self.seed, self.sampler = seed, sampler
        self.base_seed = seed * 1_000_003 + rank * 10_007
        self.gen = torch.Generator()

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.sampler is not None:
            samples = [torch.randn(self.input_dim, generator=self.gen.manual_seed(self.seed * 1_000_003 + index))
                       for index in self.sampler.next_batch()]
            return self._labelled(torch.stack(samples))
        self.gen.manual_seed(self.base_seed + step)
        return self._labelled(torch.randn(self.batch_size, self.input_dim, generator=self.gen))

    def eval_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The same 256 samples on every rank and in every run."""
        self.gen.manual_seed(TEACHER_SEED + 1)
        return self._labelled(torch.randn(256, self.input_dim, generator=self.gen))

    def _labelled(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.tanh(x @ self.w1) @ self.w2
        return x.to(self.device), y.to(self.device)


class DigitsData:
    """scikit-learn's handwritten digits (sdk.datasets.load_digits, read from its wheel), classified
    into 0-9. The first 1,500 images are for training; each global batch comes from the sampler,
    which gives every rank its own rows of it (by global position, shuffled per epoch), so the
    ranks share the images between them and a resumed run goes on at the sample it had reached.
    The last 297 are held out for the evaluation loss and accuracy."""

    input_dim, outputs = 64, 10
    loss = staticmethod(F.cross_entropy)

    def __init__(self, batch_size: int, seed: int, device) -> None:
        inputs, labels = sdk.datasets.load_digits()
        self.inputs, self.labels = inputs.to(device), labels.to(device)
        self.train_size = len(labels) - DIGITS_HELD_OUT
        self.sampler = sdk.GlobalSampler(self.train_size, batch_size=batch_size, shuffle=True, seed=seed)

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        rows = torch.as_tensor(self.sampler.next_batch(), device=self.inputs.device)
        return self.inputs[rows], self.labels[rows]

    def eval_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.inputs[self.train_size:], self.labels[self.train_size:]


def train(
    args: argparse.Namespace,
    *,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    data: SyntheticData | DigitsData,
    start: int,
    cadence: sdk.checkpoint.Cadence,
    checkpoint_state: Callable[[], Any],
    recipe: str,
    sharded: bool = False,
    epoch: Callable[[], int | None] = lambda: None,
    run: sdk.Resilient | None = None,
) -> int:
    """Steps ``start + 1 .. args.steps`` (the loop the MLP recipes share): reports loss and
    throughput, checkpoints ``checkpoint_state()`` when ``cadence`` says (every N steps, or the interval
    chosen under every_n_steps: auto) and at the end, in memory between them when the job keeps
    memory checkpoints (checkpointing.memory; replicated state only) (with
    ``epoch()``, the passes over the data completed, in the manifest), and prints the loss on a fixed
    evaluation batch when it starts from a checkpoint and when it ends (the same weights give the
    same number, whatever the world size). With ``run`` (sdk.resilient: fault_tolerance.mode in_place)
    a step that a rank's death left uncommitted is taken again, on the same data. Returns the last
    checkpointed step."""
    rank = sdk.rank()
    sdk.set_total_steps(args.steps)  # progress and ETA on the job's page
    if start:
        print_eval_loss(model, data, start)
    window_start, window_samples = time.perf_counter(), 0
    saved_at = start
    sampler: sdk.GlobalSampler | None = getattr(data, "sampler", None)
    for step in run.steps(args.steps) if run is not None else range(start + 1, args.steps + 1):
        if run is not None and run.in_place and sampler is not None:
            # A world of fixed size takes one global batch a step: a step taken again, or a replacement
            # going on at its replicas' step, reads that step's samples.
            sampler.position = (step - 1) * sampler.global_batch_size
        optimizer.zero_grad(set_to_none=True)
        x, y = data.batch(step)
        loss = data.loss(model(x), y)
        loss.backward()
        optimizer.step()
        if run is not None and not run.committed(step):
            continue  # a rank died during the step: nothing was applied anywhere, the step comes again
        window_samples += x.shape[0]

        last = step == args.steps
        if step % args.report_every == 0 or last:
            loss_value = loss.item()
            elapsed = time.perf_counter() - window_start
            throughput = window_samples / elapsed if elapsed > 0 else 0.0
            # With gradient compression, the bytes this rank sent per step (the hook's own counters).
            sdk.report(step=step, loss=loss_value, throughput=throughput, **sdk.comm_metrics(model))
            window_start, window_samples = time.perf_counter(), 0
            if step % args.log_every == 0 or last:
                print(
                    f"rank {rank} step {step} loss {loss_value:.5f} ({throughput:.0f} samples/s)", flush=True
                )
        # Preempted (a job of higher priority needs the GPUs): save now, on every rank, and yield;
        # the job resumes from this step when it runs again.
        preempted = sdk.should_yield() and not last
        if cadence.due(step) or (cadence.enabled and last) or preempted:
            metadata = {"recipe": recipe, "loss": loss.item()}
            with sdk.preemption.committing():
                if sdk.checkpoint.save(checkpoint_state(), step, sharded=sharded, metadata=metadata, epoch=epoch()):
                    saved_at = step
            if preempted and saved_at == step:
                sdk.yield_for_preemption(step)
        elif not sharded and sdk.checkpoint.memory_due(step):
            # checkpointing.memory: a copy in this machine's memory and its buddies', which a recovery
            # resumes from when it is the newest that survives (the loop waits only for the host copy).
            sdk.checkpoint.save(checkpoint_state(), step, metadata={"recipe": recipe}, epoch=epoch(), tier="memory")
        if args.step_sleep > 0:
            time.sleep(args.step_sleep)
    if args.steps > start:
        print_eval_loss(model, data, args.steps)
    return saved_at


def print_eval_loss(model: nn.Module, data: SyntheticData | DigitsData, step: int) -> None:
    x, y = data.eval_batch()
    with torch.no_grad():
        output = model(x)
        loss = data.loss(output, y).item()
    accuracy = ""
    if data.outputs > 1:  # a classifier: also the share of held-out samples it gets right
        accuracy = f", accuracy {(output.argmax(dim=1) == y).float().mean().item():.3f}"
    print(f"rank {sdk.rank()}: eval loss {loss:.6f}{accuracy} at step {step}", flush=True)


def refused(recipe: str, argv: list[str] | None, dataset: str | None = None) -> bool:
    """Print why the job's hyperparameters cannot run here (recipe_params), if they cannot; the
    control plane refuses them at submission, plain torchrun with a config of its own only here."""
    lines = recipe_params.refusals(recipe, sdk.job_config()["hyperparameters"],
                                   sys.argv[1:] if argv is None else argv, dataset)
    for line in lines:
        print(f"rank {sdk.rank()}: {line}", file=sys.stderr, flush=True)
    return bool(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if refused(RECIPE, argv, args.dataset):
        return 2
    # Several processes (other ranks, other nodes of the job) often share one machine's cores, and
    # torch's OpenMP threads slow down several-fold when oversubscribed: one thread unless told.
    torch.set_num_threads(max(1, args.threads))
    sdk.init_process_group()
    rank, world = sdk.rank(), sdk.world_size()
    print(f"rank {rank}: starting ({world} processes, backend {sdk.planned_backend()})", flush=True)
    sdk.print_distributed_info()

    hp = sdk.config(DEFAULTS)
    device = sdk.device()
    # The global sample position goes into every checkpoint: a resume at another world size (an
    # elastic job) continues at the same sample. Synthetic data is endless unless an epoch is
    # declared (dataset_size, or epochs asked for): then every epoch sees the same samples again.
    data: SyntheticData | DigitsData
    epoch_size: int | None
    if args.dataset == "digits":
        try:
            data = DigitsData(int(hp["batch_size"]), args.seed, device)
        except sdk.datasets.DatasetUnavailable as exc:
            print(f"rank {rank}: {exc}", file=sys.stderr, flush=True)
            return 2
        sampler, input_dim, epoch_size = data.sampler, data.input_dim, data.train_size
    else:
        epoch_size = recipe_params.synthetic_epoch(hp)
        sampler = sdk.GlobalSampler(epoch_size or 1 << 40, batch_size=int(hp["batch_size"]))
        data = SyntheticData(int(hp["input_dim"]), int(hp["batch_size"]), args.seed, rank, device, sampler=sampler)
        input_dim = int(hp["input_dim"])
    args.steps = recipe_params.steps(hp, args.steps, epoch_size, sampler.global_batch_size)
    torch.manual_seed(args.seed)  # identical initial weights everywhere (DDP also broadcasts rank 0's)
    model = MLP(input_dim, int(hp["hidden"]), data.outputs).to(device)
    optimizer = recipe_optimizer.build_optimizer(model.parameters(), hp, default=recipe_params.DEFAULT_OPTIMIZER[RECIPE])
    cadence = sdk.checkpoint.cadence(args.checkpoint_every)

    start = 0
    resumed = sdk.checkpoint.load_latest()
    if resumed is not None:
        state, start, _manifest = resumed
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        # A checkpoint from before the position was kept: every step took one global batch.
        sampler.load_state_dict(state["data"] if state.get("data") else {"position": start * sampler.global_batch_size})
        if "rng" in state:
            sdk.checkpoint.restore_rng(state["rng"])
        print(f"rank {rank}: resumed from checkpoint at step {start}", flush=True)
    # In place (fault_tolerance.mode in_place) a replacement rank takes the model, the optimizer and the
    # data position from a live replica's memory; otherwise this is sdk.wrap_ddp(model).
    run = sdk.resilient(model, optimizer, start=start)
    epochs = f" ({hp['epochs']} epochs of {epoch_size} samples)" if hp.get("epochs") is not None else ""
    print(
        f"rank {rank}: training steps {start + 1}..{args.steps}{epochs} with {type(optimizer).__name__}, batch "
        f"{hp['batch_size']} per rank (global {hp['global_batch_size']}), lr {recipe_params.learning_rate(hp):g}, "
        f"checkpoint every {cadence.plan()}, from global sample {sampler.position}",
        flush=True,
    )

    saved_at = train(
        args, model=run.model, optimizer=run.optimizer, data=data, start=start, cadence=cadence,
        checkpoint_state=lambda: {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                                  "data": sampler.state_dict(), "rng": sdk.checkpoint.rng_state()},
        recipe="mlp_ddp", epoch=lambda: sampler.epoch if epoch_size else None, run=run,
    )  # fmt: skip
    run.shutdown()
    print(
        f"rank {rank}: done at step {max(start, args.steps)} (last checkpoint: {saved_at or '-'})", flush=True
    )
    sdk.shutdown_process_group()  # barrier, then destroy (a bare destroy can abort a peer at exit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
