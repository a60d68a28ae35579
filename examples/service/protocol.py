"""The wire protocol: one JSON object per line, in both directions.

Requests::

    {"op": "work", "id": 7}     -> {"id": 7, "ok": true, "result": {...}}
                                   {"id": 7, "ok": false, "error": "Timeout", "info": "..."}
    {"op": "stats"}             -> {"limiter": {...}, "backends": {...}, ...}

A client sends one request at a time per connection and waits for its answer.
Closing the connection before the answer cancels the request.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
from anyio.abc import ByteStream

MAX_LINE = 64 * 1024

#: What a read that ends the conversation may raise.
DISCONNECTED = (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError)


def encode(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


class LineStream:
    """Reads newline-terminated messages from a byte stream.

    :meth:`wait_closed` reads ahead while a request runs, so the server
    notices a client that hangs up without waiting for the answer.
    """

    def __init__(self, stream: ByteStream) -> None:
        self.stream = stream
        self._buffer = bytearray()
        self.closed = False

    async def _fill(self) -> None:
        try:
            data = await self.stream.receive()
        except DISCONNECTED:
            self.closed = True
            return
        self._buffer += data
        if len(self._buffer) > MAX_LINE:
            raise ValueError("line too long")

    async def receive(self) -> dict[str, Any] | None:
        """The next message, or ``None`` once the peer has closed."""
        while True:
            end = self._buffer.find(b"\n")
            if end >= 0:
                line = bytes(self._buffer[:end])
                del self._buffer[: end + 1]
                message = json.loads(line)
                if not isinstance(message, dict):
                    raise ValueError("a message must be a JSON object")
                return message
            if self.closed:
                return None
            await self._fill()

    async def wait_closed(self) -> None:
        """Return when the peer closes (data it sends meanwhile is kept)."""
        while not self.closed:
            await self._fill()

    async def send(self, message: dict[str, Any]) -> None:
        await self.stream.send(encode(message))
