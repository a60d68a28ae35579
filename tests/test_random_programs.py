"""Random programs of coroutine shapes under invariants (``benchmarks/programs.py``, issue 24).

The quick mode here: a few hundred seeded programs per backend (trio on a ``MockClock``), and a
few dozen with a ``RedisMutex`` on a real redis-server. ``FUTOIN_PROGRAMS=N`` runs N per
backend instead; the long mode is ``python -m benchmarks.programs --programs 100000``.
``FUTOIN_PROGRAMS_SEED`` picks another first seed.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # ``pytest`` run without ``python -m``
    sys.path.insert(0, str(REPO))

from benchmarks.programs import Report, run  # noqa: E402

SEED = int(os.environ.get("FUTOIN_PROGRAMS_SEED", "1"))
PROGRAMS = {"asyncio": 150, "trio": 600}


def _check(report: Report, wanted: int) -> None:
    problems = "\n".join(f"seed {seed}: {'; '.join(found)}" for seed, found in report.failures)
    assert not report.failures, f"invariants broken:\n{problems}"
    assert report.programs == wanted
    # The programs reached the shapes they exist for (a generator that drifted would not).
    for what in ("coroutines", "sections", "served", "break", "cont", "handled", "deferred",
                 "execute"):
        assert report.counts.get(what, 0) > 0, f"no program exercised {what}"


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_random_programs_keep_the_invariants(backend: str) -> None:
    programs = int(os.environ.get("FUTOIN_PROGRAMS", PROGRAMS[backend]))
    report = run(backend, SEED, programs)
    _check(report, programs)
    # Entries refused by a full queue, place or rate: rarer (few flows meet at one primitive),
    # so only asked of trio's larger run, on its virtual clock (asyncio's 150 programs refuse
    # about twice). Both backends' refusals: tests/test_limiter.py.
    if backend == "trio":
        assert report.counts.get("refused", 0) > 0, "no program exercised a refusal"


# coredis leaves the memory streams of a request that failed (its first EVALSHA of a script
# the server has not loaded yet answers NoScriptError) unclosed: a ResourceWarning when the
# collector finds them, at a moment of its choosing. Not ours (tests/test_redis_limits.py too).
@pytest.mark.filterwarnings("ignore::ResourceWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_random_programs_with_a_redis_mutex(backend: str, redis_server: Any) -> None:
    pytest.importorskip("coredis")
    programs = 40
    report = run(backend, SEED + 7_000_000, programs, redis_server.port)
    _check(report, programs)
    assert report.counts.get("sections of RedisMutex", 0) > 0
