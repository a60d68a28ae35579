#!/bin/sh
# Install this checkout with its test extras into a virtual environment, then run the whole
# test suite on both backends (asyncio and trio). Extra arguments go to pytest.
#
# Usage: scripts/test.sh [pytest args...]
# Environment: VENV (default .venv) names the virtual environment; PYTHON the interpreter
# that creates it (default python3); EXTRAS the extras installed with it (default test,trio).
set -eu
cd "$(dirname "$0")/.."
# The futoin_anyio.redis tests run against a real redis-server (Debian package redis-server).
if ! command -v redis-server >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "installing redis-server (apt-get) for the futoin_anyio.redis tests" >&2
        apt-get update -qq >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
        # The tests start their own servers: the service the package may start is not needed.
    else
        echo "redis-server is missing; the tests need it. Install it with:" >&2
        echo "    sudo apt-get install -y redis-server" >&2
        exit 1
    fi
fi
VENV="${VENV:-.venv}"
PYTHON="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
# Builds the cffi extension of the binary bridge (needs a C compiler) and, where Cython and the
# compiler work, the compiled engine in place (FUTOIN_ANYIO_NO_EXTENSIONS=1: the pure one).
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -e ".[${EXTRAS:-test,trio}]"
# The interop tests (tests/test_interop_reference.py) build the FutoIn C++ reference from the
# folder named by FUTOIN_CPP_REFERENCE: ../shared/third_party when that exists. They need g++
# and the Boost headers, installed here when possible (root with apt-get).
if [ -z "${FUTOIN_CPP_REFERENCE:-}" ] && [ -d ../shared/third_party ]; then
    FUTOIN_CPP_REFERENCE="$(cd ../shared/third_party && pwd)"
    export FUTOIN_CPP_REFERENCE
fi
if [ -n "${FUTOIN_CPP_REFERENCE:-}" ] && [ ! -f /usr/include/boost/version.hpp ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "installing the Boost headers for the C++ reference build (libboost-dev)"
        apt-get install -y -q libboost-dev >/dev/null 2>&1 \
            || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q libboost-dev >/dev/null 2>&1; } \
            || echo "could not install libboost-dev: the interop tests will fail saying so" >&2
    else
        echo "the interop tests need the Boost headers: apt-get install libboost-dev" >&2
    fi
fi
# benchmarks.instructions runs valgrind (its test simulates one small scenario): installed here
# when possible, as the Boost headers are.
if ! command -v valgrind >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "installing valgrind for the test of benchmarks.instructions"
        apt-get install -y -q valgrind >/dev/null 2>&1 \
            || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q valgrind >/dev/null 2>&1; } \
            || echo "could not install valgrind: its test will be skipped saying so" >&2
    else
        echo "the test of benchmarks.instructions needs valgrind: apt-get install valgrind" >&2
    fi
fi
exec "$VENV/bin/python" -m pytest "$@"
