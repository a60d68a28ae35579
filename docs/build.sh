#!/bin/sh
# Build the HTML documentation, failing on any warning (and unresolved
# reference).  Offline: no intersphinx.  Usage: docs/build.sh [python]
set -eu
cd "$(dirname "$0")/.."
PYTHON="${1:-${PYTHON:-.venv/bin/python}}"
exec "$PYTHON" -m sphinx -W -n --keep-going -q -b html docs docs/_build/html
