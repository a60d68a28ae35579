#!/bin/sh
# Install this checkout with its test extras into a virtual environment, then run the whole
# test suite on both backends (asyncio and trio). Extra arguments go to pytest.
#
# Usage: scripts/test.sh [pytest args...]
# Environment: VENV (default .venv) names the virtual environment; PYTHON the interpreter
# that creates it (default python3).
set -eu
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
PYTHON="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
# Builds the cffi extension of the binary bridge: needs a C compiler.
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -e ".[test,trio]"
exec "$VENV/bin/python" -m pytest "$@"
