"""Runs and their configs: YAML and overrides to a validated ``RunConfig``
(``config``, ``config_sources``, ``config_reference``, ``builtin_configs``), a run
directory with its lock, metrics and summary (``run``), provenance, plots and
seed groups. Built on the trainer; the commands build on these."""
