"""Types that carry results: a typed user program checks under mypy --strict and pyright strict.

``tests/typing/user_program.py`` is the program: lambda and ``def`` steps, ``asi.tool``, the
``NoReturn`` of ``error()``/``break_loop()``, a parallel step's results and ``promise_as()``.
Both checkers must pass it with nothing reported: mypy with ``--warn-return-any``, pyright with
``# pyright: strict`` (every ``reportUnknown*`` rule on).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PROGRAM = Path(__file__).resolve().parent / "typing" / "user_program.py"
ROOT = PROGRAM.parent.parent.parent


def _run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600,
                          check=False)


def test_user_program_runs() -> None:
    out = _run([sys.executable, str(PROGRAM)])
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "10"


def test_mypy_strict() -> None:
    pytest.importorskip("mypy", reason="mypy is in the dev extra: pip install -e '.[dev]'")
    out = _run([sys.executable, "-m", "mypy", "--strict", "--warn-return-any",
                "--no-incremental", str(PROGRAM)])
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Success: no issues found in 1 source file" in out.stdout


def _pyright() -> list[str]:
    exe = Path(sys.executable).with_name("pyright")
    if exe.exists():
        return [str(exe)]
    found = shutil.which("pyright")
    if found is None:
        pytest.skip("pyright is not installed (it is in the dev and test extras)")
    return [found]


def test_pyright_strict() -> None:
    cmd = _pyright()
    if shutil.which("node") is None and not os.environ.get("PYRIGHT_PYTHON_NODE_VERSION"):
        pytest.skip("pyright needs node (nodejs), which is not on this machine")
    try:
        out = _run([*cmd, "--pythonpath", sys.executable, str(PROGRAM)])
    except subprocess.TimeoutExpired:  # pragma: no cover - a first run fetches pyright itself
        pytest.skip("pyright could not start in time (its first run installs its npm package)")
    text = out.stdout + out.stderr
    if out.returncode not in (0, 1) or ("error:" not in text and "0 errors" not in text):
        pytest.skip(f"pyright could not run: {text[-500:]}")
    assert out.returncode == 0, text
    assert "0 errors, 0 warnings, 0 informations" in text, text
