"""TransformerLab's plugin SDK as its plugins import it, answered by Torchyard's plugin harness
(torchyard/harness.py puts this package's folder on the plugin's path): `plugin_sdk.distributed_utils`.
A plugin that ships its own plugin_sdk keeps it: the plugin's folder comes first."""
