"""The live streams have one contract (torchyard.stream_contract): the close codes and the event
envelope the server uses are the ones the OpenAPI schema publishes (and the dashboard's types are
generated from), and every message a job stream sends, from the project's whole ASGI application
over a real channel layer, is valid against the published component of its route."""

from __future__ import annotations

import ast
import asyncio
import datetime as dt
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from channels.testing import WebsocketCommunicator
from drf_spectacular.generators import SchemaGenerator
from torchyard import stream_contract as contract
from torchyard_server.jobs.models import Job
from torchyard_server.live import consumers, frames
from torchyard_server.live.routing import websocket_urlpatterns
from torchyard_server.streaming import jsontext
from torchyard_server.streaming.bulk import StoredEvent, insert_events
from torchyard_server.streaming.models import event_message
from torchyard_server.streaming.serializers import EventOut

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    return json.loads(json.dumps(SchemaGenerator().get_schema(request=None, public=True), default=str))


def json_schema(node: Any) -> Any:
    """An OpenAPI 3.0 schema as JSON Schema: `nullable` becomes a null alternative."""
    if isinstance(node, list):
        return [json_schema(n) for n in node]
    if not isinstance(node, dict):
        return node
    converted = {k: json_schema(v) for k, v in node.items() if k != "nullable"}
    return {"anyOf": [converted, {"type": "null"}]} if node.get("nullable") else converted


def validator(schema: dict[str, Any], component: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator({"$ref": f"#/components/schemas/{component}",
                                            "components": json_schema(schema["components"])})


def test_the_schema_publishes_the_close_codes_and_routes_the_server_uses(schema):
    schemas = schema["components"]["schemas"]
    assert schemas["StreamCloseCode"]["enum"] == [4401, 4404, 4429]
    assert schemas["StreamRefusedCloseCode"]["enum"] == [consumers.CLOSE_UNAUTHENTICATED, consumers.CLOSE_NOT_FOUND]
    assert schemas["StreamResumeCloseCode"]["enum"] == [consumers.CLOSE_RESUME]
    assert {f"/{p.pattern}".replace("<int:job_id>", "{job_id}") for p in websocket_urlpatterns} == set(
        schema["x-websockets"])


def test_no_close_code_is_written_outside_the_contract():
    """A code spelled out anywhere else is a second definition that can drift (4403 once did)."""
    found = []
    for tree in ("backend/torchyard_server", "workers/torchyard"):
        for path in (ROOT / tree).rglob("*.py"):
            if path.name == "stream_contract.py":
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and type(node.value) is int and 4400 <= node.value < 4500:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value}")
    assert found == []


def test_the_event_envelope_is_the_published_one_wherever_the_server_writes_an_event(schema):
    assert tuple(EventOut().fields) == contract.EVENT_ENVELOPE
    assert tuple(schema["components"]["schemas"]["EventOut"]["properties"]) == contract.EVENT_ENVELOPE
    now = dt.datetime.now(dt.UTC)
    message = event_message(pk=1, job_id=2, node_id=None, node_rank=None, rank=None, attempt=0, dedupe_key="c2-1",
                            type="result", ts=now, payload={"ok": True})
    assert tuple(message)[1:] == contract.EVENT_ENVELOPE
    text = jsontext.event_text('{"ok":true}', pk=1, job_id=2, node_id=None, node_rank=None, rank=None, attempt=0,
                               seq=None, type="result", ts=now.isoformat())
    assert tuple(jsontext.decode(text))[1:] == contract.EVENT_ENVELOPE
    frame = jsontext.decode(frames.frame_text([text], prev=0, last=1, replay=True))
    validator(schema, "EventsFrame").validate(frame)


def store(job, kind: str, payload: dict[str, Any], seq: int) -> None:
    insert_events([StoredEvent(job_id=job.pk, node_id=None, attempt=0, node_rank=0, rank=0, type=kind,
                               ts=dt.datetime.now(dt.UTC), payload=payload, dedupe_key=f"c{job.pk}-{seq}")])


async def messages(path: str, headers) -> tuple[list[dict[str, Any]], int | None]:
    """What a stream sends until its replay is over, then its answer to a message from the client;
    or, refused, the close code."""
    from torchyard_server.asgi import application

    communicator = WebsocketCommunicator(application, path, headers=headers)
    await communicator.connect(timeout=10)
    sent: list[dict[str, Any]] = []
    try:
        while True:
            output = await communicator.receive_output(timeout=10)
            if output["type"] == "websocket.close":
                return sent, output["code"]
            sent.append(json.loads(output["text"]))
            if sent[-1]["type"] == contract.REPLAYED:
                await communicator.send_to(text_data="hello")
                sent.append(await communicator.receive_json_from(timeout=10))
                return sent, None
    finally:
        await communicator.disconnect()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("history", ["", "&history=tail"])
def test_every_message_of_a_job_stream_is_valid_against_the_published_schema(schema, api, two_machines, member,
                                                                              history):
    response = api.post("/api/jobs", {"name": "streamed", "entrypoint": "examples/mlp_ddp.py"}, format="json")
    assert response.status_code == 201, response.json()
    job = Job.objects.get(pk=response.json()["id"])
    store(job, "state", {"scope": "job", "status": "queued", "previous": None, "reason": ""}, 1)
    store(job, "log", {"stream": "stdout", "line": "step 1"}, 2)
    store(job, "metric", {"step": 1, "throughput": 9.5, "grad_norm": 0.3}, 3)
    sent, code = asyncio.run(messages(f"/api/jobs/{job.pk}/stream?after=0{history}", member))
    assert code is None
    kinds = [m["type"] for m in sent]
    assert kinds[0] == contract.JOB and kinds[-2:] == [contract.REPLAYED, contract.ERROR]
    assert [e["type"] for m in sent if m["type"] == contract.EVENTS for e in m["events"]] == ["state", "log", "metric"]
    check = validator(schema, contract.ROUTES["/api/jobs/{job_id}/stream"])
    for message in sent:
        check.validate(message)


@pytest.mark.django_db(transaction=True)
def test_a_refused_stream_closes_with_a_published_code(schema, job):
    sent, code = asyncio.run(messages(f"/api/jobs/{job.pk}/stream", []))
    assert (sent, code) == ([], contract.CLOSE_UNAUTHENTICATED)
    assert code in schema["components"]["schemas"]["StreamRefusedCloseCode"]["enum"]
