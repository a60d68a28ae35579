"""The backends and the closed-loop clients of ``benchmarks.gateway`` (asyncio protocols).

Shared by the driver (the clients), the backends' process and the front (the protocol's
constants). The protocol, JSON lines throughout:

* client → front: ``{"id": 7, "kind": "ok"}``; front → client: ``{"id": 7, "outcome": "ok",
  "value": 72}``, the outcome one of :data:`OUTCOMES` (no reply when the client hung up);
* front → backend ``a`` or ``b``: ``{"id": 7, "kind": "ok", "attempt": 1}``; backend → front:
  ``{"id": 7, "attempt": 1, "value": 50}`` or ``{"id": 7, "attempt": 1, "error": "Retry"}``.

The request's seeded ``kind`` says how the backends answer (:data:`OUTCOME` gives what the
front must reply):

* ``ok``: both answer at once; the reply's value is ``a + b``;
* ``retry``: ``b`` answers error :data:`RETRY_CODE` to attempt 1; the front retries ``b`` once;
* ``fail``: ``a`` answers error :data:`FAIL_CODE`; the front cancels ``b`` and replies ``failed``;
* ``slow``: ``a`` answers after :data:`SLOW_S`, beyond the front's 200 ms deadline;
* ``hangup``: ``a`` answers after :data:`HANGUP_BACKEND_S`; the client closes its connection
  :data:`HANGUP_AFTER_S` after sending, and the front must cancel the request.

``python -m benchmarks._gateway_load`` runs both backends in one process and prints
``ports A B``; it ends when its standard input closes, or after :data:`BACKEND_LIFETIME_S`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import sys
from collections import Counter
from functools import partial
from typing import Any

KINDS = ("ok", "retry", "fail", "slow", "hangup")
#: The mixed phase: percentages of each kind (seeded per client).
MIX = {"ok": 75, "retry": 10, "fail": 6, "slow": 5, "hangup": 4}
#: What the front replies for each kind, when it admits the request.
OUTCOME = {"ok": "ok", "retry": "retried", "fail": "failed", "slow": "timeout",
           "hangup": "hung_up"}
OUTCOMES = ("ok", "retried", "failed", "timeout", "rejected", "hung_up")
RETRY_CODE = "Retry"
FAIL_CODE = "BackendFailed"
DEADLINE_MS = 200
SLOW_S = 0.4
HANGUP_BACKEND_S = 1.0
HANGUP_AFTER_S = 0.01
BACKEND_LIFETIME_S = 900.0


def value_a(rid: int) -> int:
    return rid * 7 + 1


def value_b(rid: int, attempt: int) -> int:
    return rid * 3 + attempt


def expected_value(rid: int, outcome: str) -> int:
    """The value of an ``ok`` (attempt 1 of ``b``) or ``retried`` (attempt 2) reply."""
    return value_a(rid) + value_b(rid, 2 if outcome == "retried" else 1)


def kinds_of(seed: int, client: int) -> random.Random:
    """The random source of one client's kinds: the same seed gives the same requests."""
    return random.Random(seed * 1_000_003 + client)


MIX_TABLE = tuple(kind for kind, share in MIX.items() for _ in range(share))


class JSONLines(asyncio.Protocol):
    """A protocol of JSON lines: :meth:`message` gets each one, decoded."""

    _transport: asyncio.Transport | None = None
    _buf = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self._buf = b""

    def data_received(self, data: bytes) -> None:
        buf = self._buf + data
        while (end := buf.find(b"\n")) >= 0:
            self.message(json.loads(buf[:end]))
            buf = buf[end + 1:]
        self._buf = buf

    def message(self, msg: dict[str, Any]) -> None:
        raise NotImplementedError

    def write(self, line: bytes) -> None:
        assert self._transport is not None
        self._transport.write(line)


# --------------------------------------------------------------------------- backends


class Backend(JSONLines):
    """Backend ``a`` or ``b``: answers each request line as its kind says (see the module)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._loop = asyncio.get_running_loop()

    def message(self, req: dict[str, Any]) -> None:
        rid, kind, attempt = req["id"], req["kind"], req["attempt"]
        reply: dict[str, Any] = {"id": rid, "attempt": attempt}
        delay = 0.0
        if self.name == "a":
            reply["value"] = value_a(rid)
            if kind == "fail":
                reply = {"id": rid, "attempt": attempt, "error": FAIL_CODE}
            elif kind == "slow":
                delay = SLOW_S
            elif kind == "hangup":
                delay = HANGUP_BACKEND_S
        elif kind == "retry" and attempt == 1:
            reply["error"] = RETRY_CODE
        else:
            reply["value"] = value_b(rid, attempt)
        line = json.dumps(reply).encode() + b"\n"
        if delay:
            self._loop.call_later(delay, self._late, line)
        else:
            self.write(line)

    def _late(self, line: bytes) -> None:
        assert self._transport is not None
        if not self._transport.is_closing():  # the front gave up on it (hang-up)
            self.write(line)


async def _serve_backends() -> None:
    loop = asyncio.get_running_loop()
    servers = [await loop.create_server(partial(Backend, name), "127.0.0.1", 0)
               for name in ("a", "b")]
    ports = [s.sockets[0].getsockname()[1] for s in servers]
    print(f"ports {ports[0]} {ports[1]}", flush=True)
    stdin = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(stdin.read(), BACKEND_LIFETIME_S)  # until stdin closes
    for s in servers:
        s.close()


# --------------------------------------------------------------------------- clients


class Load:
    """One phase: each client sends ``per_client`` requests; the tallies of what came back."""

    def __init__(self, per_client: int, mixed: bool, allow_rejected: bool) -> None:
        self.per_client = per_client
        self.mixed = mixed
        self.allow_rejected = allow_rejected
        self.sent = 0
        self.seen: Counter[str] = Counter()
        #: What the kinds sent call for (rejections aside): the same for every side.
        self.expected: Counter[str] = Counter()
        #: Requests of another kind answered ``timeout`` (the front missed the deadline), and
        #: ``slow`` ones answered ``ok`` (the front's loop ran neither at the deadline nor
        #: before the late answer): a stalled machine; allowed, counted.
        self.late = 0
        self.wrong: list[str] = []
        self.active = 0
        self.done = asyncio.Event()


class Client(JSONLines):
    """One closed-loop client: a request, its reply (checked), the next request. A ``hangup``
    request closes the connection mid-request; the client then connects again."""

    def __init__(self, port: int, rng: random.Random) -> None:
        self.port = port
        self.rng = rng
        self.load = Load(0, False, False)
        self.left = 0
        self._id = 0
        self.outstanding: tuple[int, str] | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def connection_lost(self, exc: Exception | None) -> None:
        pass  # a hang-up's old connection; teardown closes the current one

    def start(self, load: Load) -> None:
        self.load = load
        self.left = load.per_client
        load.active += 1
        self.send()

    def send(self) -> None:
        load = self.load
        if self.left == 0:
            load.active -= 1
            if load.active == 0:
                load.done.set()
            return
        self.left -= 1
        kind = self.rng.choice(MIX_TABLE) if load.mixed else "ok"
        self._id += 1
        self.outstanding = (self._id, kind)
        load.sent += 1
        load.expected[OUTCOME[kind]] += 1
        self.write(json.dumps({"id": self._id, "kind": kind}).encode() + b"\n")
        if kind == "hangup":
            asyncio.get_running_loop().call_later(HANGUP_AFTER_S, self._hang_up)

    def _hang_up(self) -> None:
        self.load.seen["hung_up"] += 1
        self.outstanding = None
        self.close()
        task = asyncio.ensure_future(self._reconnect())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _reconnect(self) -> None:
        await asyncio.get_running_loop().create_connection(lambda: self, "127.0.0.1", self.port)
        self.send()

    def message(self, msg: dict[str, Any]) -> None:
        load = self.load
        if self.outstanding is None:
            load.wrong.append(f"unexpected {msg}")
            return
        rid, kind = self.outstanding
        outcome = msg["outcome"]
        if msg["id"] != rid:
            load.wrong.append(f"{msg} for request {rid}")
        elif outcome == "rejected":
            if not load.allow_rejected:
                load.wrong.append(f"{msg}: rejected in a phase that admits every request")
        elif outcome == "timeout" and kind != "slow" and kind != "hangup":
            load.late += 1
        elif kind == "slow" and outcome == "ok" and msg["value"] == expected_value(rid, "ok"):
            load.late += 1  # the loop ran neither at the deadline nor before the late answer
        elif outcome != OUTCOME[kind]:
            load.wrong.append(f"{msg} for a request of kind {kind}")
        elif outcome in ("ok", "retried") and msg["value"] != expected_value(rid, outcome):
            load.wrong.append(f"{msg}: wrong value")
        load.seen[outcome] += 1
        self.outstanding = None
        self.send()

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()


def main() -> int:
    asyncio.run(_serve_backends())
    return 0


if __name__ == "__main__":
    sys.exit(main())
