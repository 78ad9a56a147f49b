"""Adapters that let work written for other tools run on Torchyard as it is: each package takes one
tool's routes and payloads and calls the canonical services. Nothing below imports them."""
