"""Warm interpreters: ranks forked from a Python that has already imported torch.

`zygote` is the fork server an agent keeps per training Python (it imports torch once, starts no
thread, never initialises CUDA, and forks a fresh child per rank); `run` is what a node starts in
torchrun's place to have its ranks forked there, with torchrun's environment, files and exit codes;
`pools` is the agent's side (which Pythons have a pool, where their sockets are, how many fit).
"""
