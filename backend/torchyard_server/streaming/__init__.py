"""The event store: a job's events as the controller's ingest loop stores and applies them (models,
migrations, bulk write, ingest), and what reads them back over HTTP (the events listing, metrics
downsampled in the database) or counts them (telemetry). Its live fan-out to the WebSocket and SSE
clients runs elsewhere, in the web processes: the live package, which registers a
registries.BatchListener to receive each committed batch."""
