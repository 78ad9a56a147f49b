"""The live fan-out: what a job's stored events become on their way to the clients that follow them.

The event store (the streaming app: models, bulk write, the ingest loop, REST listings and metrics)
runs in the controller; what is here runs mostly in the web processes, which hold the WebSockets and
the SSE responses, plus the part of the controller that sends to them over the channel layer. It sits
above streaming and reads from it; streaming never imports it: the ingest loop hands each committed
batch to the fan-out through streaming.registries.batch_listeners, which LiveConfig.ready() answers.

- broadcast: the ingest's committed batches as one group message per job (the controller's side);
- groups, frames: the channel-layer group names and the `events` frames, written once per batch;
- routing, auth, backpressure, consumers, inbound: the WebSocket streams, their authentication, what
  a slow client is held, and what a client's own frames get;
- replay, recent: a job stream's first replay (the tail) and the frames a client catches up from;
- cluster, queue, tasks: the cluster stream's job updates, its queue and its machine table;
- sse: a job's log lines as Server-Sent Events, caught up from the same groups;
- contract_schema: these streams' contract (torchyard.stream_contract) in the OpenAPI schema.
"""
