"""What a node hands over once its processes are gone: a function job's results and the files the
ranks wrote under their output directory. Both go out before the final state, so a finished job is
complete when it says so."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from torchyard import protocol
from torchyard.bundles import size_text
from torchyard.protocol import NodeLaunch
from torchyard.stream_contract import ResultEvent

from . import functions
from .argv import OUTPUT_DIR
from .output_pump import OutputPump
from .outputs import collect_outputs
from .states import Outcome, SupervisorState

# A result's text, masked for the job's secrets before it is published.
RESULT_TEXTS: tuple[Literal["repr", "error_type", "error", "traceback", "sha256", "uri"], ...] = (
    "repr", "error_type", "error", "traceback", "sha256", "uri")


def collect_results(launch: NodeLaunch, run_dir: Path, pump: OutputPump) -> list[ResultEvent]:
    """A function job: every rank's return value (or exception) into the store, one `result` event
    per rank."""
    if not launch.function:
        return []
    results, failures = functions.collect(launch, run_dir)
    for result in results:
        masked = result.copy()
        for key in RESULT_TEXTS:
            if isinstance(text := masked.get(key), str):
                masked[key] = pump.mask(text)
        pump.publisher.emit(masked, rank=result.get("rank"))
    for failure in failures:
        pump.supervisor_line(f"could not collect result {failure}")
    return results


def function_outcome(launch: NodeLaunch, results: list[ResultEvent], outcome: Outcome) -> Outcome:
    """A node that failed because the job's function raised says so (and that retrying is no use),
    rather than only that its launcher exited 1. Also when the controller's stop overtook the
    node's own end (another node's ranks saw this one's go away first): a rank that raised did
    not stop, and reporting it stopped would have the job relaunched to raise again."""
    failed = functions.raised(results)
    if failed is None or outcome.state is SupervisorState.COMPLETED:
        return outcome
    reason = (f"node rank {launch.node_rank}: global rank {failed['rank']} raised "
              f"{failed.get('error_type')}: {failed.get('error')}")
    return Outcome(SupervisorState.FAILED, outcome.exit_code, reason, fatal=True)


def collect_node_outputs(launch: NodeLaunch, workdir: Path, pump: OutputPump) -> None:
    """Copy what the node wrote under its output directory into the store; one `artifact` event per
    batch of files."""
    output_dir = workdir / OUTPUT_DIR
    if not output_dir.is_dir():
        return
    destination = f"{launch.checkpoint_url.rstrip('/')}/artifacts/attempt-{launch.attempt}/node-{launch.node_rank}"
    collected, failures = collect_outputs(output_dir, destination)
    for start in range(0, len(collected), 200):
        pump.publisher.emit({"type": protocol.ARTIFACT, "files": collected[start:start + 200]})
    for failure in failures:
        pump.supervisor_line(f"could not collect output {failure}")
    if collected:
        total = sum(f["size"] for f in collected)
        pump.supervisor_line(f"collected {len(collected)} output file(s), {size_text(total)}")
