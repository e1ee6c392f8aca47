"""The building blocks under the reference's modules.

Config classes (``configclasses``), the env contract checked at the first reset
and step (``env_contract``), action bounds, episode windows, finite-state checks,
termination, atomic file writes, the checkpoint index, and the parent watch of
child processes. Nothing here imports a module above it: the reference's modules
(``pathgrad.env``, ``pathgrad.collector``, ``pathgrad.checkpoint``...) build on
these, the trainer and the commands on those.
"""
