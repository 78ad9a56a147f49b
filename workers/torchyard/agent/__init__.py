"""The Torchyard agent: one per machine, a Celery worker on the queue `machine.<id>`.

It reports capabilities and load, starts a detached node supervisor per launch and returns at once,
and stops supervisors on request. It never touches the database: it knows the Redis URL, its
machine token and where it keeps run directories, nothing more."""
