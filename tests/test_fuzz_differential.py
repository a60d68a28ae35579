"""Differential fuzzing: random step programs must give one trace on asyncio, trio and the JS
reference implementation (npm ``futoin-asyncsteps``).

The program model and strategy are in :mod:`fuzz.program`, the Python interpreter in
:mod:`fuzz.interp`, the JavaScript translator and the batched ``node`` runner in :mod:`fuzz.js`.
Every program runs in virtual time on all three, and a trace records each step, loop iteration,
error handler and cancel handler call with its arguments and virtual time, and the outcome.

asyncio vs trio: the traces must be identical, always. A second, Python-only strategy adds
``async def`` steps (real tasks), which JS cannot express; there the backends' task schedulers
legitimately order same-instant events of different branches, so each flow's part of the trace
is compared (see ``test_differential_python_only``).

futoin_anyio vs JS: identical, except where our semantics (docs/semantics.rst) deliberately
differ or the reference has a bug; each such rule is applied by the translator (R2-R6, see
:mod:`fuzz.js`) or by :func:`fuzz.interp.norm_info` (R1):

* R1 ``error_info`` of an ``InternalError`` is not compared (Python puts the exception text there).
* R2 a plain Python exception is translated as ``throw new Error("InternalError")``.
* R3 a loop with nothing to iterate is translated as a step succeeding with no arguments.
* R4 ``success_step`` is translated as a step that calls ``success()`` (JS's ``successStep``
  adds no step when the queue is empty).
* R5 JS parallel branches start behind one immediate callback (a reference bug loses the error of
  a branch failing synchronously during ``executeParallel``; see ``test_js_reference_quirks``).
* R6 a late external completion of a step that failed is ignored: here its error handler gets a
  fresh step object and the failed one is out of service; the reference hands the failed
  step's own object to the handler, so the late call hits its sanity check (InternalError).
* R7 a break/continue whose label no loop has ends the root with ``error_info`` naming that label
  (the reference leaves it empty): not compared either (:func:`fuzz.interp.norm_info`).
* R8 a ``Timeout``'s ``error_info`` names the limit and the timed step (issue 26; the reference
  leaves it empty): not compared either (:func:`fuzz.interp.norm_info`).

Programs whose trace depends on how an implementation orders events due at the same virtual
instant are run on JS but not compared (counted in the statistics):

* N1 two timers due at the same virtual time: which fires first is the timer queue's choice
  (and when a timeout fires while the reference has an execution pending, it cancels the root);
* N2 more than 60 steps at one virtual time: both yield to the event loop after a burst of 100
  steps, at different points, which reorders parallel branches;
* N3 a parallel nested in a parallel branch: R5's gate costs nested branches two immediate hops
  relative to their parent's siblings, and the reference completes a parallel step synchronously
  where Python resumes the parent flow one scheduler hop later (see
  :func:`fuzz.js.static_skip_reason`).

N1 and N2 are decided from the Python run itself, N3 from the program; nothing is ever
normalised by reordering a trace.

Set ``FUZZ_EXAMPLES`` for a longer run by hand, ``FUZZ_RANDOM=1`` for programs other than CI's
fixed set, and ``FUZZ_STATS=path`` to get the counts as JSON.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fuzz.interp import Result, run_program
from fuzz.js import NodeRunner, static_skip_reason
from fuzz.program import Fail, Jump, Loop, Par, Program, Step, Sub, Succeed, Wait, programs
from hypothesis import HealthCheck, given, settings

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "500"))
#: CI runs a fixed set of programs; ``FUZZ_RANDOM=1`` draws new ones (by hand).
DERANDOMIZE = not os.environ.get("FUZZ_RANDOM")
STATS: Counter[str] = Counter()
REF_DIR = Path("/tmp/ref/node_modules/futoin-asyncsteps")


def _reference_package(tmp: Path) -> Path | None:
    """The reference package: $FUTOIN_ASYNCSTEPS_JS, a local copy, or a fresh npm install."""
    env = os.environ.get("FUTOIN_ASYNCSTEPS_JS")
    if env:
        return Path(env)
    if (REF_DIR / "AsyncSteps.js").exists():
        return REF_DIR
    npm = shutil.which("npm")
    if npm is None:
        return None
    try:
        subprocess.run(
            [npm, "install", "--prefix", str(tmp), "--no-audit", "--no-fund", "--silent",
             "futoin-asyncsteps@2"],
            check=True, capture_output=True, timeout=300,
        )
    except (subprocess.SubprocessError, OSError):
        return None
    pkg = tmp / "node_modules" / "futoin-asyncsteps"
    return pkg if (pkg / "AsyncSteps.js").exists() else None


@pytest.fixture(scope="session")
def node_runner(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeRunner | None]:
    """One node process for the whole session, or ``None`` without node (JS comparison skipped)."""
    if shutil.which("node") is None:
        yield None
        return
    tmp = tmp_path_factory.mktemp("futoin_js")
    pkg = _reference_package(tmp)
    if pkg is None:
        yield None
        return
    runner = NodeRunner(pkg, tmp)
    yield runner
    runner.close()
    path = os.environ.get("FUZZ_STATS")
    if path:
        Path(path).write_text(json.dumps(dict(STATS), indent=1, sort_keys=True))


def _skip_reason(program: Program, res: Result) -> str | None:
    if res.collision:
        return "N1"
    if res.burst > 60:
        return "N2"
    return static_skip_reason(program)


def check_program(program: Program, node: NodeRunner | None) -> None:
    on_asyncio = run_program(program, "asyncio")
    on_trio = run_program(program, "trio")
    STATS["programs"] += 1
    assert on_asyncio.trace == on_trio.trace, program
    assert on_asyncio.outcome == on_trio.outcome, program
    STATS["outcome-" + on_trio.outcome[0]] += 1
    if node is None:
        return
    js_trace, js_outcome = node.run(program)
    reason = _skip_reason(program, on_trio)
    if reason is not None:
        STATS["js-skipped-" + reason] += 1
        return
    STATS["js-compared"] += 1
    assert (on_trio.trace, on_trio.outcome) == (js_trace, js_outcome), program


@settings(max_examples=EXAMPLES, derandomize=DERANDOMIZE, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(program=programs())
def test_differential(program: Program, node_runner: NodeRunner | None) -> None:
    """asyncio, trio and (with node) the JS reference agree on every random program."""
    check_program(program, node_runner)


@settings(max_examples=max(100, EXAMPLES // 2), derandomize=DERANDOMIZE, deadline=None,
          database=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(program=programs(python_only=True))
def test_differential_python_only(program: Program) -> None:
    """With ``async def`` steps (real tasks; no JS twin): asyncio and trio agree.

    Coroutine steps run as tasks, and trio deliberately randomises the order in which tasks
    that became runnable together run. So the order of same-instant events *across* parallel
    branches is the backend's: each flow's subsequence of the trace is compared, not their
    interleaving. A coroutine also sleeps on the backend's clock, outside the engine's timer
    queue: when two timers are due at the same instant (N1) the comparison is skipped (counted).
    """
    on_asyncio = run_program(program, "asyncio")
    on_trio = run_program(program, "trio")
    STATS["python-only-programs"] += 1
    if on_trio.collision:
        STATS["python-only-N1"] += 1
        assert on_asyncio.collision
        return
    assert on_asyncio.per_flow() == on_trio.per_flow(), program
    assert on_asyncio.outcome == on_trio.outcome, program
    if on_asyncio.trace != on_trio.trace:
        STATS["python-only-interleaved"] += 1


def test_fuzzer_exercises_everything() -> None:
    """The strategy reaches every kind of node (a fuzzer that never fails proves nothing)."""
    seen: set[str] = set()

    def walk(nodes: tuple[Any, ...]) -> None:
        for node in nodes:
            if not isinstance(node, Step):
                seen.add("success_step")
                continue
            seen.add(type(node.body).__name__)
            if node.timeout is not None:
                seen.add("timeout")
            if node.oncancel:
                seen.add("oncancel")
            if node.onerror is not None:
                seen.add("handler-" + node.onerror.kind)
                walk(node.onerror.steps)
            b = node.body
            if isinstance(b, Sub):
                walk(b.children)
            elif isinstance(b, Par):
                walk(b.branches)
            elif isinstance(b, Loop):
                seen.add("loop-" + b.kind)
                if b.label:
                    seen.add("label")
                walk(b.body)

    @settings(max_examples=300, derandomize=True, database=None, deadline=None)
    @given(programs())
    def collect(program: Program) -> None:
        walk(program.steps)
        if program.cancel_at is not None:
            seen.add("cancel")

    collect()
    expected = {"Succeed", "Fail", "Wait", "Sub", "Par", "Loop", "Jump", "success_step",
                "timeout", "oncancel", "cancel", "label", "loop-loop", "loop-repeat",
                "loop-for_each"} | {f"handler-{k}" for k in
                                    ("recover", "replace", "add", "pass", "raise")}
    assert expected <= seen, expected - seen


# -- disagreements the fuzzer found, one minimal example each ----------------------------------


def test_first_substep_gets_no_args(node_runner: NodeRunner | None) -> None:
    """BUG-F1 (fixed): the first sub-step and the first step added by an error handler get no
    arguments; the engine used to pass them the parent's / the failed step's incoming ones.

    Spec: "other arguments come from the previous as.success() call, if any"; the reference
    resets them when a step is entered and when an error unwinds.
    """
    program = Program((
        Step(1, Succeed((5,))),
        Step(2, Sub((Step(3, Succeed(None)),))),
        Step(4, Succeed((6,))),
        Step(5, Fail("E1", False), onerror=_add_handler(6, Step(7, Succeed(None)))),
    ))
    res = run_program(program, "trio")
    assert res.trace == [["step", 1, [], 0], ["step", 2, [5], 0], ["step", 3, [], 0],
                         ["step", 4, [], 0], ["step", 5, [6], 0],
                         ["onerror", 6, "E1", "i5", 0], ["step", 7, [], 0]]
    if node_runner is not None:
        assert node_runner.run(program) == (res.trace, res.outcome)


def test_labelled_continue_from_parallel_branch(node_runner: NodeRunner | None) -> None:
    """BUG-F2 (fixed): a break/continue label survives leaving a parallel branch; a label no
    loop has unwinds out of every loop as a ``LoopCont`` error (docs/semantics.rst, "Loops").
    The engine used to drop the label at the branch boundary and continue the enclosing loop
    instead."""
    program = Program((
        Step(1, Loop(1, "repeat", 2, None, (
            Step(2, Par(3, (Step(4, Jump(False, "nowhere")),), None)),
        ))),
    ))
    res = run_program(program, "trio")
    assert res.outcome == ["error", "LoopCont", None]
    assert res.trace == [["step", 1, [], 0], ["iter", 1, [0], 0], ["step", 2, [], 0],
                         ["step", 4, [], 0]]
    if node_runner is not None:
        assert node_runner.run(program) == (res.trace, res.outcome)


def _add_handler(hid: int, *steps: Step) -> Any:
    from fuzz.program import Handler

    return Handler(hid, "add", steps=steps)


def test_js_reference_quirks(node_runner: NodeRunner | None) -> None:
    """The reference behaviours that rules R4 and R5 work around, pinned so a new reference
    version that changes them is noticed (and the rules can go)."""
    if node_runner is None:
        pytest.skip("node and futoin-asyncsteps are not available")
    from fuzz.js import translate

    # R5: a branch failing synchronously in executeParallel loses its error in JS; with the gate
    # (what translate() emits) the error reaches the outer handler, as in futoin_anyio.
    program = Program((Step(1, Par(2, (Step(3, Fail("E1", False)), Step(4, Succeed(None))),
                                   None), timeout=500),))
    res = run_program(program, "trio")
    assert res.outcome == ["error", "E1", "i3"]
    assert node_runner.run(program) == (res.trace, res.outcome)
    ungated = translate(program).replace("as.add(_gate);", "")
    assert ungated != translate(program)
    # R4: a step with a timeout whose only sub-step is a success_step completes here (the JS
    # successStep would leave it waiting for the timeout).
    program = Program((Step(1, Sub((_success_step(),)), timeout=250), Step(2, Succeed(None))))
    res = run_program(program, "trio")
    assert res.outcome == ["ok", []] and res.trace[-1] == ["step", 2, [], 0]
    assert node_runner.run(program) == (res.trace, res.outcome)


def test_late_completion_of_a_failed_step(node_runner: NodeRunner | None) -> None:
    """R6, found by a random run: a step times out, its handler adds a step that waits; the
    timed-out step's own external error arrives later and is ignored (its object is out of
    service). The step added by the handler then fails on its own, at 375 ms."""
    program = Program((
        Step(1, Wait(250, False, (), "E1"), timeout=125, oncancel=True,
             onerror=_add_handler(2, Step(3, Wait(250, False, (), "E1"), oncancel=True))),
    ))
    res = run_program(program, "trio")
    assert res.trace == [["step", 1, [], 0], ["cancel", 1, 125],
                         ["onerror", 2, "Timeout", None, 125], ["step", 3, [], 125],
                         ["cancel", 3, 375]]
    assert res.outcome == ["error", "E1", "w3"]
    if node_runner is not None:
        assert node_runner.run(program) == (res.trace, res.outcome)


def _success_step() -> Any:
    from fuzz.program import SuccessStep

    return SuccessStep(())


def test_virtual_time_is_exact() -> None:
    """Times in traces are exact virtual milliseconds on both backends."""
    program = Program((Step(1, Wait(1125, True, (1,), "E1")), Step(2, Wait(250, True, (), "E1")),
                       Step(3, Succeed(None), timeout=375)))
    for backend in ("asyncio", "trio"):
        res = run_program(program, backend)
        assert res.trace == [["step", 1, [], 0], ["step", 2, [1], 1125], ["step", 3, [], 1375]]
        assert res.outcome == ["error", "Timeout", None]
