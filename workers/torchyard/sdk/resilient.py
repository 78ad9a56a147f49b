"""Training that goes on when one rank dies (`fault_tolerance.mode: in_place`, DESIGN.md section 15).

    run = sdk.resilient(model, optimizer, start=start, state=extra_state, load_state=load_extra)
    for step in run.steps(total):
        loss = loss_fn(run.model(x(step)), y(step))
        run.optimizer.zero_grad()
        loss.backward()
        run.optimizer.step()
        if not run.committed(step):
            continue  # a rank died during this step: nothing was applied; the same step comes again

Under `in_place` every rank is a replica of the model in torchft's sense (PyTorch's fault-tolerance
library): a replica group of one process. Before each step its Manager asks the job's lighthouse
(started by node 0's warm launcher on the job's master port) who is alive; gradients are averaged
over torchft's own process group, which is re-formed whenever the quorum changes, so no rank has to
restart for it. When a rank dies its step is not committed anywhere; the warm launcher forks its
replacement on the same machine; the survivors wait, kept alive, until it joins (the quorum needs
every rank: the model's state stays what an uninterrupted run's is), and the replacement receives a
live replica's state (model, optimizer, `state()`) from that replica's memory before the next step.

Outside `in_place` (the default restart mode, plain torchrun, a single process) the same loop runs
with `model` wrapped by `sdk.wrap_ddp`, the optimizer as it is and every step committed, so a
script written this way runs under both modes unchanged.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

from torchyard.sdk import context, preemption
from torchyard.sdk.distributed import ENV_LIGHTHOUSE, in_place, planned_backend, wrap_ddp

# Set on a replacement rank: how many ranks of this node were replaced before it (1 for the first).
ENV_REPLACEMENT = "TORCHYARD_FT_REPLACEMENT"
# How long the survivors wait for a dead rank's replacement before they give up, and the launcher
# falls back to restarting the attempt.
ENV_REJOIN_TIMEOUT = "TORCHYARD_FT_REJOIN_TIMEOUT"
DEFAULT_REJOIN_TIMEOUT_S = 60.0
# How long one step's quorum request waits. A request can go unanswered (torchft 0.2.0: a replica whose
# step a peer's death interrupted sometimes never reaches the lighthouse again, and every other replica
# then waits for it): the step is then not committed, and the next one asks again.
QUORUM_TIMEOUT_S = 10.0
# A collective (and a store or a peer's state transfer) that takes longer failed: the step is taken again.
COLLECTIVE_TIMEOUT_S = 30.0


def is_replacement() -> bool:
    """Whether this process replaces a rank that died (its state comes from a live replica)."""
    return bool(os.environ.get(ENV_REPLACEMENT))


def own_address() -> str:
    """This machine's address on the route to the job's master: where the other replicas reach this
    one's store and state (a UDP socket's connect sends nothing)."""
    master = os.environ.get("MASTER_ADDR", "127.0.0.1")
    port = int(os.environ.get("MASTER_PORT", "29500") or 29500)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect((master, port))
            return str(probe.getsockname()[0])
        except OSError:
            return "127.0.0.1"


class Resilient:
    """The model and optimizer to train with, and the steps to run (module docstring)."""

    def __init__(self, model: Any, optimizer: Any, *, start: int = 0,
                 state: Callable[[], dict[str, Any]] | None = None,
                 load_state: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.manager: Any = None
        self._store: Any = None
        self._timeout_s = DEFAULT_REJOIN_TIMEOUT_S
        if not in_place():
            self.model, self.optimizer = wrap_ddp(model), optimizer
            self._step = start
            return
        self.model, self.optimizer = self._managed(model, optimizer, start, state, load_state)
        preemption.replicas_agreed(False)  # sdk.should_yield reads what the replicas agreed from now on

    def _managed(self, model: Any, optimizer: Any, start: int, state: Callable[[], dict[str, Any]] | None,
                 load_state: Callable[[dict[str, Any]], None] | None) -> tuple[Any, Any]:
        try:
            import torchft
        except ImportError:
            raise RuntimeError("fault_tolerance.mode in_place needs torchft in the training Python of this machine "
                               "(pip install 'torchyard[in-place]', or torchft==0.2.0); or submit with mode restart") from None
        from torch.distributed import TCPStore

        def state_dict() -> dict[str, Any]:
            return {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "extra": state() if state else {}}

        def load_state_dict(value: dict[str, Any]) -> None:
            model.load_state_dict(value["model"])
            optimizer.load_state_dict(value["optimizer"])
            if load_state is not None and value.get("extra"):
                load_state(value["extra"])

        address = own_address()
        # The replica group's own store (a group of one process): torchft's process group meets there.
        self._store = TCPStore(address, 0, is_master=True, wait_for_workers=False)
        self._timeout_s = float(os.environ.get(ENV_REJOIN_TIMEOUT) or DEFAULT_REJOIN_TIMEOUT_S)
        timeout = timedelta(seconds=COLLECTIVE_TIMEOUT_S)
        group = torchft.ProcessGroupNCCL() if planned_backend() == "nccl" else torchft.ProcessGroupGloo(timeout=timeout)
        self.manager = torchft.Manager(
            pg=group, load_state_dict=load_state_dict, state_dict=state_dict,
            # Every rank in every step: a step taken by fewer would change what the model learns.
            min_replica_size=context.world_size(),
            replica_id=f"rank{context.rank()}", lighthouse_addr=os.environ[ENV_LIGHTHOUSE],
            rank=0, world_size=1, store_addr=address, store_port=self._store.port, hostname=address,
            timeout=timeout, quorum_timeout=timedelta(seconds=QUORUM_TIMEOUT_S), connect_timeout=timeout,
        )
        if start:
            # Resumed from a checkpoint on disk: the replicas' step count goes on from there.
            self.manager.load_state_dict({"step": start, "batches_committed": start * context.world_size()})
        return replicated(self.manager, model), _optimizer(self.manager, optimizer)

    @property
    def in_place(self) -> bool:
        """Whether a rank's death is survived here (torchft manages the replicas)."""
        return self.manager is not None

    @property
    def step(self) -> int:
        """The last step every replica committed."""
        return int(self.manager.current_step()) if self.manager is not None else self._step

    def steps(self, total: int) -> Iterator[int]:
        """The next step to take, until `total`: a step that was not committed comes again, and a
        replacement rank goes on at the step its replicas reached. A step that cannot commit for the
        rejoin timeout (the replacement never came) raises, and the attempt restarts."""
        failing_since: float | None = None
        while self.step < total:
            step = self.step + 1
            yield step
            if self.manager is None:
                self._step = step
            elif self.manager.current_step() >= step:
                failing_since = None
            else:
                failing_since = failing_since or time.monotonic()
                if time.monotonic() - failing_since > self._timeout_s:
                    raise RuntimeError(f"step {step} could not commit for {self._timeout_s:g} s: a replaced rank did "
                                       f"not rejoin ({ENV_REJOIN_TIMEOUT}); the attempt restarts")
                self._reconfigure_if_broken()

    def _reconfigure_if_broken(self) -> None:
        """torchft 0.2.0 records a quorum as configured before it configures the process group for it:
        when that fails (a peer's store went away mid-way), every later step of the same quorum finds
        no group and fails, and the replicas wait forever. Forgetting the quorum makes the next step
        configure it again."""
        group = getattr(self.manager, "_pg", None)
        if group is not None and getattr(group, "_pg", True) is None:
            self.manager._quorum_id = -1

    def committed(self, step: int) -> bool:
        """Whether `step`'s update was applied on every replica (under in_place a rank's death during
        the step leaves it out everywhere)."""
        return self.manager is None or self.manager.current_step() >= step

    def shutdown(self) -> None:
        if self.manager is not None:
            self.manager.shutdown(wait=False)
            self.manager = None


def replicated(manager: Any, module: Any) -> Any:
    """torch's DistributedDataParallel whose gradients are averaged by the torchft Manager over the live
    replicas, as torchft.DistributedDataParallel does (a dummy group soaks up DDP's own start-up
    collectives; buckets are never rebuilt, so a replacement's match the survivors'), with a hook that
    survives a peer's death mid-collective: torchft 0.2.0's asserts on a work that failed while it
    waited (its future chain is never built), which kills the survivors this mode exists to keep. A
    failed collective leaves the manager errored, so the step is not committed anywhere: the bucket's
    bytes do not matter."""
    import torch
    from torch.nn.parallel import DistributedDataParallel
    from torchft.process_group import ProcessGroupDummy

    # Unannotated: DDP refuses a hook whose annotations are not its own types (here they would be strings).
    def average(state, bucket):  # type: ignore[no-untyped-def]
        try:
            work = state.allreduce(bucket.buffer())
        except Exception as exc:  # noqa: BLE001 - a quorum that did not form in time (QUORUM_TIMEOUT_S)
            # The step is not committed; the next one asks the lighthouse again, afresh.
            state.report_error(exc)
            work = None
        managed = getattr(work.get_future(), "_fut", None) if work is not None and work.wait() else None
        if managed is not None:
            return managed
        if work is not None:
            # A peer died mid-collective: leave the group now. Its sockets close, so a live peer blocked on
            # this rank in the same collective fails at once instead of at the collective timeout (until
            # then it cannot join the next quorum, and every replica waits for it).
            with contextlib.suppress(Exception):
                state._pg.abort()
        done: Any = torch.futures.Future()
        done.set_result(bucket.buffer())
        return done

    ddp = DistributedDataParallel(module, process_group=ProcessGroupDummy(0, 1), find_unused_parameters=True)
    ddp.register_comm_hook(manager, average)
    return ddp


def _optimizer(manager: Any, optimizer: Any) -> Any:
    """torchft's optimizer wrapper (zero_grad asks for the step's quorum, step applies the update only
    when every replica commits), whose step does not raise when the quorum did not form in time: the
    step is then simply not committed (QUORUM_TIMEOUT_S)."""
    import torch
    import torchft
    from torch.distributed import ReduceOp

    class Optimizer(torchft.Optimizer):  # type: ignore[misc]
        def zero_grad(self, set_to_none: bool = True) -> None:
            try:
                self.manager.start_quorum()  # raises the last quorum's failure, if it failed
            except TimeoutError:
                self.manager._quorum_future = None  # torchft 0.2.0 would raise that one again
                self.manager.start_quorum()
            self.optim.zero_grad(set_to_none)

        def step(self, closure: object = None) -> None:
            # Inside every step, as one more collective of it: whether any replica saw a preemption
            # request, agreed only when the step commits (sdk.should_yield reads it). A collective of
            # its own outside the step would pair with another one on a replica whose step did not
            # commit, and wait for it.
            flag = torch.tensor([1.0 if preemption.preemption_requested() else 0.0])
            try:
                flag_sent = self.manager.allreduce(flag, reduce_op=ReduceOp.SUM).wait()
                step = self.manager.current_step()
                super().step(closure)
            except TimeoutError as exc:
                self.manager.report_error(exc)
                return
            if flag_sent and self.manager.current_step() > step:
                preemption.replicas_agreed(bool(flag.item() > 0))

    return Optimizer(manager, optimizer)


def resilient(model: Any, optimizer: Any, *, start: int = 0, state: Callable[[], dict[str, Any]] | None = None,
              load_state: Callable[[dict[str, Any]], None] | None = None) -> Resilient:
    """The training loop's model and optimizer, which survive a rank's death under in_place (module
    docstring). `start`: the step a checkpoint on disk resumed from. `state`/`load_state`: what else a
    replacement needs from a live replica (the data position, say); the model's and the optimizer's
    state always go."""
    if in_place():
        print(f"[torchyard] rank {context.rank()}: in_place fault tolerance (torchft)"
              + (f", replacing a rank that died (replacement {os.environ[ENV_REPLACEMENT]})" if is_replacement() else ""),
              file=sys.stderr, flush=True)
    return Resilient(model, optimizer, start=start, state=state, load_state=load_state)
