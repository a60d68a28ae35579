"""Shared fixtures: every async test runs on asyncio and on trio."""

from __future__ import annotations

import faulthandler
import os
from collections.abc import Iterator

import pytest
from hypothesis import Phase, settings

#: ``pytester`` runs a pytest of its own (tests of the test helpers, ``test_testing_aid.py``).
pytest_plugins = ["pytester"]

# The explain phase traces every line of a failing example: on our fuzz programs that takes
# minutes. Shrinking still gives a minimal failing program.
settings.register_profile("futoin", phases=[p for p in Phase if p is not Phase.explain])
settings.load_profile("futoin")


def pytest_report_header() -> str:
    """Which engine the run tests: the compiled build or the pure-Python one."""
    from futoin_anyio import COMPILED

    if COMPILED and os.environ.get("FUTOIN_ANYIO_NO_EXTENSIONS", "") not in ("", "0"):
        # Installed pure, yet extension modules of another install are found (an in-place
        # build for this Python in the source tree): the run would not test what it says.
        raise pytest.UsageError("FUTOIN_ANYIO_NO_EXTENSIONS is set, but the compiled engine "
                                "is loaded: remove futoin_anyio/_*.so from the source tree")
    return f"futoin_anyio engine: {'compiled (Cython)' if COMPILED else 'pure Python'}"


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Run each ``@pytest.mark.anyio`` test on both backends."""
    return str(request.param)


@pytest.fixture(autouse=True)
def _hang_guard() -> Iterator[None]:
    """A test that hangs dumps every thread's stack and ends the run instead of stalling CI."""
    faulthandler.dump_traceback_later(120, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture(autouse=True)
def _coredis_garbage(request: pytest.FixtureRequest) -> Iterator[None]:
    """coredis leaves memory streams of its closed or failed connections unclosed; they warn
    (``ResourceWarning``) when collected, which could be in any later test or at the end of
    the session. After each Redis test (its event loop closed), collect them quietly."""
    yield
    if request.module.__name__.startswith("test_redis"):
        import gc
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            gc.collect()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[object]:
    """A real redis-server on 127.0.0.1 and a free port, for the whole session."""
    from redis_support.server import RedisServer

    server = RedisServer()
    yield server
    server.close()


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[object]:
    """A real Redis Cluster (3 masters, 3 replicas) on 127.0.0.1 and free ports, for the whole
    session (a failover test restarts the node it killed: it rejoins as a replica)."""
    import shutil

    from redis_support.cluster import RedisCluster

    missing = [exe for exe in ("redis-server", "redis-cli") if shutil.which(exe) is None]
    if missing:
        pytest.skip(f"{' and '.join(missing)} not installed: the Redis Cluster tests need them "
                    "(scripts/test.sh installs them with apt-get)")
    cluster = RedisCluster()
    yield cluster
    cluster.close()
