"""What a machine's agent and a node's supervisor both need, below both (neither imports the other;
the agent starts the supervisor as a process, `python -m torchyard.supervisor`).

Modules: proctree (finding, measuring and killing a job's processes), stacks (a process's Python
stack and state, read from outside), preemption (the request file the agent writes and the node
watches), network (this machine's addresses and network stack), versions (the training Python's
versions), environments (a node's virtual environment, cached per machine), standby (a supervisor
started ahead: its command line and the agent's hand-over).
"""
