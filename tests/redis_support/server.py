"""A real ``redis-server`` for the tests: started on 127.0.0.1 and a free port, no persistence
unless asked (``aof=True``: every write is on disk before its reply, as ``appendfsync always``)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

__all__ = ("RedisServer",)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """One server process; ``restart()`` keeps the port and the folder: the data is lost as in a
    crash, unless ``aof`` (then the server comes back with every write it acknowledged)."""

    def __init__(self, aof: bool = False, replica_of: RedisServer | None = None) -> None:
        exe = shutil.which("redis-server")
        if exe is None:
            raise RuntimeError("redis-server is not installed: run scripts/test.sh, or "
                               "`apt-get install -y redis-server`")
        self.exe = exe
        self.aof = aof
        self.replica_of = replica_of  # a replica of that server (see :meth:`link_up`)
        self.port = _free_port()
        self.dir = tempfile.mkdtemp(prefix="futoin-redis-")
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [self.exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "yes" if self.aof else "no", "--appendfsync", "always",
             "--dir", self.dir, "--protected-mode", "no", "--repl-diskless-sync-delay", "0",
             *(["--replicaof", "127.0.0.1", str(self.replica_of.port)] if self.replica_of
               else [])],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:  # the server's start-up, not a limit under test
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError(f"redis-server did not start on port {self.port}")
            time.sleep(0.02)

    def info(self, section: str) -> dict[str, str]:
        """``INFO section`` as a dict (a plain socket: usable from any thread)."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=2) as s:
            s.sendall(f"INFO {section}\r\n".encode())
            data = b""
            while True:  # a bulk string: $<length>\r\n<text>\r\n
                chunk = s.recv(65536)
                if not chunk:
                    raise RuntimeError(f"redis-server on port {self.port} closed the connection")
                data += chunk
                header, sep, rest = data.partition(b"\r\n")
                if sep and len(rest) >= int(header[1:]):
                    break
        return dict(line.split(":", 1) for line in rest.decode().splitlines() if ":" in line)

    def link_up(self, timeout: float = 10) -> None:
        """A replica: wait until its link to the master is up (its initial sync done)."""
        deadline = time.monotonic() + timeout
        while self.info("replication").get("master_link_status") != "up":
            if time.monotonic() > deadline:
                raise RuntimeError(f"replica on port {self.port}: no link to its master")
            time.sleep(0.02)

    @property
    def address(self) -> str:
        """How a worker process is told to connect (see ``redis_support.worker``)."""
        return str(self.port)

    def pause(self) -> None:
        """Freeze the server (``SIGSTOP``): connections stay open, nothing is answered."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGCONT)

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def restart(self) -> None:
        self.kill()
        self.start()

    def close(self) -> None:
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)
