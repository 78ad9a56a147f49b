"""DistroML's view of the cluster: its workers and resources (`/api/cluster/workers`, `/resources`)."""
