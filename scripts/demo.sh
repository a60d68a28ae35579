#!/bin/sh
# The demo service: an AnyIO TCP server where every request is one AsyncSteps
# flow (Limiter, per-request timeout, parallel fan-out, cancellation when the
# client hangs up), loaded by a client for about ten seconds.
#
# Usage: scripts/demo.sh [--backend asyncio|trio] [--duration SECONDS] [--processes N]
# With --processes N, N server processes share one port and one RedisLimiter
# (a throwaway redis-server: needs the Debian package redis-server).
# Creates (or reuses) a virtual environment in .venv and installs this
# checkout into it with the trio extra.
set -eu
cd "$(dirname "$0")/.."

backend=asyncio
duration=10
processes=1
while [ $# -gt 0 ]; do
    case "$1" in
        --backend) backend="$2"; shift 2 ;;
        --backend=*) backend="${1#*=}"; shift ;;
        --duration) duration="$2"; shift 2 ;;
        --duration=*) duration="${1#*=}"; shift ;;
        --processes) processes="$2"; shift 2 ;;
        --processes=*) processes="${1#*=}"; shift ;;
        -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "unknown argument: $1 (try --help)" >&2; exit 2 ;;
    esac
done
case "$backend" in
    asyncio|trio) ;;
    *) echo "--backend must be asyncio or trio, not $backend" >&2; exit 2 ;;
esac

PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    echo "creating .venv with $PYTHON" >&2
    "$PYTHON" -m venv .venv
fi
if ! .venv/bin/python -m pip show -q futoin_anyio >/dev/null 2>&1 \
        || ! .venv/bin/python -c "import trio, coredis" >/dev/null 2>&1; then
    echo "installing futoin_anyio[trio,redis] into .venv (log: .venv/demo-install.log)" >&2
    if ! .venv/bin/python -m pip install -e ".[trio,redis]" > .venv/demo-install.log 2>&1; then
        tail -n 30 .venv/demo-install.log >&2
        echo "installation failed; see .venv/demo-install.log" >&2
        exit 1
    fi
fi
if [ "$processes" != 1 ] && ! command -v redis-server >/dev/null 2>&1; then
    echo "--processes needs redis-server: apt-get install -y redis-server" >&2
    exit 2
fi
exec .venv/bin/python -m examples.service.demo --backend "$backend" --duration "$duration" \
    --processes "$processes"
