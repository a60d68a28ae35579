"""Binary compatibility with the FutoIn C++ reference implementation, both directions.

The reference is compiled from the folder named by ``FUTOIN_CPP_REFERENCE`` (``scripts/test.sh``
sets it to ``../shared/third_party`` when that exists) together with tests/interop/ref_cases.cpp.
Each case runs in a subprocess (tests/interop/run_case.py) on each backend, so a crash of
either side is a failed test. ``cpp_*``: C++ code drives our AsyncSteps (C++ -> Py);
``py_*``: Python drives a reference root through ``AsyncSteps.wrap()`` (Py -> C++). Rows refer
to the table of issue 17.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "interop"))
import refbuild

HERE = Path(__file__).resolve().parent
RUNNER = HERE / "interop" / "run_case.py"
MIB_KIB = 1024
N_STRINGS = 300


@pytest.fixture(scope="session")
def reflib() -> Path:
    where = refbuild.reference_dir()
    if where is None:
        pytest.skip(
            f"{refbuild.ENV} is not set: point it at the C++ reference sources "
            "(scripts/test.sh does when ../shared/third_party exists)"
        )
    try:
        return refbuild.build(where)
    except refbuild.Missing as exc:  # named but not buildable: say what is missing, fail
        pytest.fail(f"cannot build the C++ reference: {exc}")


def run_case(lib: Path, name: str, backend: str, **env: str) -> Any:
    proc = subprocess.run(
        [sys.executable, str(RUNNER), str(lib), name, backend],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
        check=False,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, (
        f"case {name} on {backend}: exit code {proc.returncode}\n"
        f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    )
    return json.loads(lines[-1][len("RESULT ") :])


BACKENDS = ["asyncio", "trio"]
backend = pytest.mark.parametrize("backend", BACKENDS)


@backend
def test_row1_success_without_values(reflib: Path, backend: str) -> None:
    # an empty FutoInArgs, never NULL: also from an error handler recovering with success()
    assert run_case(reflib, "py_success_no_values", backend) == [
        ["after-empty", 0],
        ["recovered", 0],
    ]


@backend
def test_row2_stack_without_cleanup(reflib: Path, backend: str) -> None:
    # the clean-up pointer we pass is always callable; the factory's clean-up still runs once
    result = run_case(reflib, "py_stack_without_cleanup", backend)
    assert result == ["x" * 16, "obj", "obj2", "obj2"]


@backend
def test_row3_wrapper_steps_on_root_parallel_and_instance(reflib: Path, backend: str) -> None:
    result = run_case(reflib, "cpp_root_parallel_instance", backend)
    assert result == {
        "log": ["branch-a", "branch-b", "instance-step", "root-step"],
        "got": ["from-root-add", 7],
    }


@backend
def test_row4_error_info_is_an_empty_string_when_none(reflib: Path, backend: str) -> None:
    assert run_case(reflib, "cpp_error_info", backend) == ["info=[]", "MyError=[my details]"]


@backend
def test_row5_handles_tested_and_cancelled_by_foreign_code(reflib: Path, backend: str) -> None:
    # ours, from C++: non-empty, valid, cancelled through the table, never fires
    assert run_case(reflib, "cpp_sched_handles", backend) == [
        "data1-set",
        "valid",
        "invalid",
        "valid2",
        "kept-timer-fired",
    ]
    # the reference's, from Python
    assert run_case(reflib, "py_sched_handles", backend) == [True, False, "kept-fired"]


def _flat(result: dict[str, Any]) -> None:
    assert result["seen"] == [MIB_KIB * 1024]
    grew = result["rss_after_kib"] - result["rss_before_kib"]
    # N x 1 MiB went through; a leak of one value each would add N MiB
    assert grew < 32 * MIB_KIB, result


@backend
def test_row6_values_are_moved_both_ways_rss_flat(reflib: Path, backend: str) -> None:
    n = str(N_STRINGS)
    _flat(run_case(reflib, "cpp_strings_echo", backend, FUTOIN_INTEROP_N=n))
    _flat_or_dropped = run_case(reflib, "cpp_strings_left", backend, FUTOIN_INTEROP_N=n)
    assert _flat_or_dropped["seen"] == [-1]  # implicit success: nothing re-sent
    grew = _flat_or_dropped["rss_after_kib"] - _flat_or_dropped["rss_before_kib"]
    assert grew < 32 * MIB_KIB, _flat_or_dropped
    _flat(run_case(reflib, "py_strings", backend, FUTOIN_INTEROP_N=n))
    assert run_case(reflib, "py_values_to_cpp_step", backend) == {
        "got": [1000],
        "log": ["cpp-got=1000"],
    }


@backend
def test_row7_received_int32_keeps_its_width(reflib: Path, backend: str) -> None:
    assert run_case(reflib, "cpp_int32_width", backend) == {
        "log": ["int32=41 u16=2"],
        "got": ["Int32", 41, "wé", 42],
    }


@backend
def test_row8_placeholders_travel_between_cpp_steps(reflib: Path, backend: str) -> None:
    assert run_case(reflib, "cpp_placeholders", backend) == ["chain=2s"]


@backend
def test_row9_python_steps_get_the_values_they_declare(reflib: Path, backend: str) -> None:
    # C++ -> Py: (INT32, UTF-16) + two placeholders; Py -> C++: the reference pads to four
    assert run_case(reflib, "cpp_arity", backend) == [41, "none", 4]
    assert run_case(reflib, "py_arity", backend) == [[1, "two"], "none"]


@backend
def test_row10_reference_mutex_over_our_pointers(reflib: Path, backend: str) -> None:
    # two roots, whichever starts first: the second enters after the first left
    log = run_case(reflib, "cpp_mutex", backend)
    first, second = log[0][-1], log[3][-1]
    assert {first, second} == {"0", "1"}
    assert log == [f"{what}{i}" for i in (first, second) for what in ("enter", "hold", "leave")]


@backend
def test_row11_each_parallel_branch_has_its_own_root_id(reflib: Path, backend: str) -> None:
    log = run_case(reflib, "cpp_root_ids", backend)
    ids = [entry.split("=")[1] for entry in log]
    assert log[0].startswith("root=") and len(ids) == 4
    assert len(set(ids)) == 4
    assert run_case(reflib, "py_mutex_and_root_ids", backend) == {
        "distinct_ids": 3,
        "entered": [0, 1, 2],
    }


@backend
def test_row12_end_to_end_and_cancel(reflib: Path, backend: str) -> None:
    result = run_case(reflib, "cpp_e2e", backend)
    flow = ["handled-Boom", "timeout-Timeout", "par0", "par1", "par2", "loop=3"]
    assert result["first"] == flow
    assert result["got"] == ["done", 3]
    assert result["second"] == [*flow, "cancel-handler"]
    assert result["outcome"] == "Cancelled"


@backend
def test_sched_entry_goes_with_its_timer_against_the_reference(reflib: Path, backend: str) -> None:
    assert run_case(reflib, "cpp_sched_outlives_root", backend)["left_after_tool"] == 0


# -- issue 28: the reference's own IAsyncTool::Handle over our scheduler's handles ----------


@backend
def test_reference_handle_cancels_and_tests_our_timers(reflib: Path, backend: str) -> None:
    # Handle::cancel() and operator bool are C++ virtual calls through data2 (ffi/table.py,
    # IASYNCTOOL_VTABLE): the cancelled timers never fire, the control timer does, and a
    # Handle kept after its timer ended is false
    result = run_case(reflib, "cpp_handle_cancel", backend)
    assert result["log"] == [
        "bool-before-cancel=1",
        "bool-after-cancel=0",
        "copy-after-cancel=0",
        "immediate-before-cancel=1",
        "immediate-after-cancel=0",
        "control-before=1",
        "control-timer-fired",
        "control-after-fired=0",
    ]
    assert result["left"] == 0  # no entry of ours outlives its timer


@backend
def test_reference_relinquish_over_our_steps(reflib: Path, backend: str) -> None:
    result = run_case(reflib, "cpp_relinquish", backend)
    assert result == {
        "log": ["before", "turn0", "turn1", "turn2", "after"],
        "got": [5],
        "left": 0,
    }


@backend
def test_reference_relinquish_cancelled_through_its_handle(reflib: Path, backend: str) -> None:
    # cancelled while relinquish() waits: its cancel handler cancels the pending immediate
    # through IAsyncTool::Handle (one of the wrapper's two immediates goes at once, its
    # clean-up one stays and frees the callback), and the step never resumes
    result = run_case(reflib, "cpp_relinquish_cancel", backend)
    assert result == {
        "log": ["waiting"],
        "seen": [["pending-before-cancel", 2], ["pending-after-cancel", 1]],
        "outcome": "Cancelled",
        "left": 0,
    }
