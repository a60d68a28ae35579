#!/bin/sh
# Install this checkout with its test extras into a virtual environment, then run the whole
# test suite on both backends (asyncio and trio). Extra arguments go to pytest.
#
# Usage: scripts/test.sh [pytest args...]
# Environment: VENV (default .venv) names the virtual environment; PYTHON the interpreter
# that creates it (default python3).
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
# Builds the cffi extension of the binary bridge: needs a C compiler.
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -e ".[test,trio]"
exec "$VENV/bin/python" -m pytest "$@"
