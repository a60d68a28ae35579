"""The chaos driver (``benchmarks/chaos.py``): random roots under random actions, from the loop
thread and a worker thread, checked after every run (issue 18, item 2).

60 runs (about two seconds) per backend here; ``FUTOIN_CHAOS_RUNS=N`` runs N runs per backend
instead (the long mode: ``python -m benchmarks.chaos --runs N`` does the same by hand or
from the soak).
``FUTOIN_CHAOS_SEED`` picks another seed.
"""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # ``pytest`` run without ``python -m``
    sys.path.insert(0, str(REPO))

from benchmarks.chaos import _Run, run_chaos  # noqa: E402

RUNS = int(os.environ.get("FUTOIN_CHAOS_RUNS", "60"))
SEED = int(os.environ.get("FUTOIN_CHAOS_SEED", "1"))


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_chaos(backend: str) -> None:
    rep = run_chaos(backend, seed=SEED, runs=RUNS)
    assert rep.problems == []
    assert rep.runs == RUNS
    # The runs were not vacuous: every kind of outcome and actions from both threads.
    assert {"ok", "Cancelled", "E1", "InternalError"} <= set(rep.outcomes)
    assert rep.thread_actions > 0 and rep.actions > rep.thread_actions


def test_chaos_checks_are_not_vacuous() -> None:
    """check() reports each kind of broken record."""
    rep = run_chaos("trio", seed=SEED, runs=1)
    assert rep.problems == []


    one = _Run(random.Random(0), rep)
    one._root("x", False)
    rec = one.roots[0]
    rec.started, rec.ok, rec.codes, rec.infos = 1, 1, ["Bogus"], [None]
    one.cancel_counts[1] = 2
    one.cleanups[2] = 0
    one.worker_errors.append("boom")
    one.check()
    assert len(rep.problems) == 4
