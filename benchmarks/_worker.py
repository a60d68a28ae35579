"""Run Python scenarios of one implementation on one backend; print one JSON line per result.

``python -m benchmarks._worker '<json>'`` with ``{"impl": "futoin"|"plain", "backend":
"asyncio"|"trio", "scenarios": {"seq": [1000000], ...}, "repeat": 3, "budget": 5.0}``.
``run.py`` starts one of these per backend (and, in full mode, per scenario) so that
runs do not disturb each other. Exit status 1 when any scenario failed to verify.
"""

from __future__ import annotations

import importlib
import json
import sys
import traceback
from typing import Any

import anyio

from ._common import Measurement, NotAvailable, Scenario, lower_is_better

IMPLS = ("futoin", "plain")


def scenarios_of(impl: str) -> dict[str, Scenario]:
    """The scenario table of *impl*; raises :class:`NotAvailable` if it cannot be imported."""
    if impl not in IMPLS:
        raise ValueError(f"unknown implementation {impl!r}")
    try:
        module = importlib.import_module(f"benchmarks._{impl}")
    except ImportError as e:  # the engine has not landed, or is broken
        raise NotAvailable(f"{type(e).__name__}: {e}") from e
    table: dict[str, Scenario] = module.SCENARIOS
    return table


def run_one(
    impl: str, backend: str, scenario: str, n: int, repeat: int = 1, budget: float = 5.0
) -> dict[str, Any]:
    """Run *scenario* of *impl* at size *n* on *backend*, best of up to *repeat* runs.

    Repeats stop early once *budget* seconds have been spent. Returns a result record:
    ``value`` (the best figure) on success, ``na`` (reason) when the implementation
    cannot run it, ``error`` (message) when it ran and computed a wrong result or raised.
    """
    record: dict[str, Any] = {"impl": impl, "backend": backend, "scenario": scenario, "n": n}
    try:
        func = scenarios_of(impl)[scenario]
    except NotAvailable as e:
        record["na"] = str(e)
        return record
    best: Measurement | None = None
    spent = 0.0
    try:
        for _ in range(max(repeat, 1)):
            m = anyio.run(func, n, backend=backend)
            spent += m.seconds
            if best is None or (
                m.value < best.value if lower_is_better(scenario) else m.value > best.value
            ):
                best = m
            if spent >= budget:
                break
    except NotAvailable as e:
        record["na"] = str(e)
        return record
    except Exception as e:
        record["error"] = f"{type(e).__name__}: {e}"
        record["traceback"] = traceback.format_exc()
        return record
    assert best is not None
    record["value"] = best.value
    record["seconds"] = best.seconds
    return record


def main(argv: list[str]) -> int:
    config = json.loads(argv[0])
    status = 0
    for scenario, sizes in config["scenarios"].items():
        for n in sizes:
            record = run_one(
                config["impl"],
                config["backend"],
                scenario,
                n,
                config.get("repeat", 1),
                config.get("budget", 5.0),
            )
            if "error" in record:
                status = 1
                print(record.pop("traceback"), file=sys.stderr)
            print(json.dumps(record), flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
