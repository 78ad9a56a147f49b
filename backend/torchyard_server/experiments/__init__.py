"""DistroML's experiments: runs (attempts of jobs) listed, shown and compared. No models: it reads
jobs, checkpoints, artifacts and metric events, so it sits above them all (pyproject.toml)."""
