"""Reads that span several apps, and the views that answer them: a job's summary (jobs' progress
and nodes with checkpoints' count), the rows a purge deletes with a job (nodes, events, checkpoint
and artifact records), a job's goodput (its wall time split from its events, nodes and checkpoints,
kept in the usage app's ledger once it ended) and its roll-ups. Not an app (no models): a package
above the apps it reads, so none of them has to name another's relations by string or host a view
that is not its own (pyproject.toml's import contracts)."""
