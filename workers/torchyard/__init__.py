"""Torchyard's machine side: the agent, the node supervisor and the training SDK.

Nothing here imports the server (backend/); the SDK imports only the standard library and torch.
"""

__version__ = "0.1.0"
