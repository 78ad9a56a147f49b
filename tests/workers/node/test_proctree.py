"""The supervisor's walk of a process tree (node/proctree.py `children`): read downwards from
the process's own /proc entries, the same processes as psutil's scan of every process finds."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import psutil
import pytest
from torchyard.node.proctree import children, process_tree

# A parent with two children, one of which has a child of its own, started from a thread (a child
# forked by a thread is listed under that thread's task, not the main one's).
TREE = textwrap.dedent("""
    import subprocess, sys, threading, time
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    first = subprocess.Popen([sys.executable, "-c",
        "import subprocess, sys, time; subprocess.Popen(%r); time.sleep(60)" % (sleeper,)])
    threading.Thread(target=lambda: subprocess.Popen(sleeper)).start()
    print("ready", flush=True)
    time.sleep(60)
""")


@pytest.fixture
def tree():
    root = subprocess.Popen([sys.executable, "-c", TREE], stdout=subprocess.PIPE, text=True)
    try:
        assert root.stdout.readline().strip() == "ready"
        proc = psutil.Process(root.pid)
        # The grandchild comes a moment after its parent: wait until psutil sees all three.
        for _ in range(200):
            if len(proc.children(recursive=True)) == 3:
                break
            time.sleep(0.05)
        yield proc
    finally:
        for each in psutil.Process(root.pid).children(recursive=True):
            each.kill()
        root.kill()
        root.wait()


def test_children_are_the_processes_psutils_scan_finds(tree):
    assert sorted(p.pid for p in children(tree, recursive=True)) == sorted(p.pid for p in tree.children(recursive=True))
    assert len(children(tree, recursive=True)) == 3
    assert sorted(p.pid for p in children(tree)) == sorted(p.pid for p in tree.children())
    assert len(children(tree)) == 2
    assert [p.pid for p in process_tree(tree.pid)][0] == tree.pid and len(process_tree(tree.pid)) == 4


def test_a_process_that_is_gone_raises_as_psutil_does():
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    proc = psutil.Process(gone.pid)
    gone.wait()
    with pytest.raises(psutil.NoSuchProcess):
        children(proc)
    assert process_tree(gone.pid) == []
