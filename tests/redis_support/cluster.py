"""A real Redis Cluster for the tests: 3 masters and 3 replicas on 127.0.0.1 and free ports.

Started with ``redis-server --cluster-enabled yes`` and joined by ``redis-cli --cluster create
... --cluster-replicas 1 --cluster-yes``; ready once every node says ``cluster_state:ok`` and
every replica's link is up. ``cluster-node-timeout`` is 1000 ms, so a failover (a master
killed, its replica promoted) takes 2-3 s. Nodes are stopped by their PID.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

__all__ = ("RedisCluster",)

NODE_TIMEOUT_MS = 1000


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_ports(n: int) -> list[int]:
    """``n`` ports whose cluster bus ports (+10000) are free too."""
    ports: list[int] = []
    while len(ports) < n:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port + 10000 < 65536 and port not in ports and _free(port + 10000):
            ports.append(port)
    return ports


def command(port: int, *args: str, timeout: float = 2) -> str:
    """One command through ``redis-cli`` (its reply as text); raises when it fails."""
    out = subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(port), *args],
                         capture_output=True, text=True, timeout=timeout, check=True)
    return out.stdout


def _fields(text: str) -> dict[str, str]:
    return dict(line.strip().split(":", 1) for line in text.splitlines() if ":" in line)


class RedisCluster:
    """Six ``redis-server`` processes forming one cluster (see the module docstring)."""

    def __init__(self) -> None:
        exe = shutil.which("redis-server")
        cli = shutil.which("redis-cli")
        if exe is None or cli is None:
            raise RuntimeError("redis-server and redis-cli are needed: run scripts/test.sh, or "
                               "`apt-get install -y redis-server`")
        self.exe = exe
        self.ports = _free_ports(6)
        self.dir = tempfile.mkdtemp(prefix="futoin-cluster-")
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        try:
            for port in self.ports:
                self.start(port)
            subprocess.run(
                [cli, "--cluster", "create", *(f"127.0.0.1:{p}" for p in self.ports),
                 "--cluster-replicas", "1", "--cluster-yes"],
                capture_output=True, text=True, timeout=60, check=True)
            self.wait_ok()
        except BaseException:
            self.close()
            raise

    @property
    def port(self) -> int:
        """A node to connect to first (a client finds the others itself)."""
        return self.ports[0]

    @property
    def address(self) -> str:
        """How a worker process is told to connect (see ``redis_support.worker``)."""
        return f"cluster:{self.port}"

    def start(self, port: int) -> None:
        """Start (or restart, on its folder and port: it rejoins) the node of ``port``."""
        folder = os.path.join(self.dir, str(port))
        os.makedirs(folder, exist_ok=True)
        self.procs[port] = subprocess.Popen(
            [self.exe, "--port", str(port), "--bind", "127.0.0.1", "--protected-mode", "no",
             "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
             "--cluster-node-timeout", str(NODE_TIMEOUT_MS), "--save", "",
             "--appendonly", "no", "--repl-diskless-sync-delay", "0", "--dir", folder],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:  # the node's start-up, not a state under test
            try:
                if command(port, "PING").strip() == "PONG":
                    return
            except (subprocess.SubprocessError, OSError):
                pass
            if time.monotonic() > deadline or self.procs[port].poll() is not None:
                raise RuntimeError(f"redis-server (cluster node) did not start on port {port}")
            time.sleep(0.02)

    def alive(self) -> list[int]:
        return [p for p, proc in self.procs.items() if proc.poll() is None]

    def wait_ok(self, timeout: float = 30) -> None:
        """Wait until every live node says ``cluster_state:ok``, knows the 6 nodes and sees none
        failing, and every master has a replica whose link is up."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                if all(self._ok(p) for p in self.alive()):
                    return
            except (subprocess.SubprocessError, OSError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the cluster on ports {self.ports} is not ok after "
                                   f"{timeout} s")
            time.sleep(0.05)

    def _ok(self, port: int) -> bool:
        info = _fields(command(port, "CLUSTER", "INFO"))
        if info.get("cluster_state") != "ok" or info.get("cluster_known_nodes") != "6":
            return False
        if "fail" in command(port, "CLUSTER", "NODES"):  # a node seen as failing (fail?, fail)
            return False
        role = _fields(command(port, "INFO", "replication"))
        if role.get("role") == "slave":
            return role.get("master_link_status") == "up"
        return int(role.get("connected_slaves", "0")) >= 1

    def slot_nodes(self, key: str, timeout: float = 10) -> tuple[int, int]:
        """The ports of the master serving ``key`` and of its replica, as the cluster says
        (waiting, bounded, while a node rejoining after a failover is not seen as such yet)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self._slot_nodes(key)
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.05)

    def _slot_nodes(self, key: str) -> tuple[int, int]:
        port = self.alive()[0]
        slot = int(command(port, "CLUSTER", "KEYSLOT", key).strip())
        text = command(port, "CLUSTER", "NODES")
        nodes = [line.split() for line in text.splitlines()]
        master = None
        for n in nodes:
            if "master" in n[2] and "fail" not in n[2]:
                for part in n[8:]:
                    lo, _, hi = part.partition("-")
                    if lo.isdigit() and int(lo) <= slot <= int(hi or lo):
                        master = n
        if master is None:
            raise RuntimeError(f"no master serves slot {slot}")
        replicas = [n for n in nodes if n[3] == master[0] and "fail" not in n[2]]
        if not replicas:
            raise RuntimeError(f"the master of slot {slot} has no replica:\n{text}")

        def port_of(n: list[str]) -> int:
            return int(n[1].split("@")[0].rsplit(":", 1)[1])

        return port_of(master), port_of(replicas[0])

    def role(self, port: int) -> str:
        return _fields(command(port, "INFO", "replication")).get("role", "")

    def kill(self, port: int) -> None:
        """``kill -9`` of one node."""
        proc = self.procs[port]
        proc.kill()
        proc.wait()

    def signal(self, port: int, sig: signal.Signals) -> None:
        os.kill(self.procs[port].pid, sig)

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
