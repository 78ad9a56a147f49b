"""What a stream does with what its client sends. The streams only send (the cursor travels in the
URL, `?after=<id>`), so a frame from the client, text, bytes or JSON of any shape, is answered
with an error that says so; it never reaches a JSON decoder that would end the connection (1011)."""

from __future__ import annotations

import json

from channels.generic.websocket import AsyncJsonWebsocketConsumer
from torchyard import stream_contract as wire

NOT_TAKEN = json.dumps({
    "type": wire.ERROR,
    "detail": "this stream only sends: it takes no messages (to resume, reconnect with ?after=<the last event id>).",
})


class SendOnlyConsumer(AsyncJsonWebsocketConsumer):
    """The base of every stream's consumer."""

    closing = False

    async def receive(self, text_data=None, bytes_data=None, **kwargs):
        if not self.closing:  # nothing may follow a close
            await self.send(text_data=NOT_TAKEN)

    async def close(self, code=None, reason=None):
        self.closing = True
        await super().close(code=code, reason=reason)
