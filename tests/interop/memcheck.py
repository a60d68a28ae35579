"""One interop case per row of issue 17's table, and issue 28's cases, under valgrind memcheck.

A CI step of a few minutes.

Usage: ``python tests/interop/memcheck.py`` with ``FUTOIN_CPP_REFERENCE`` set and valgrind
installed. Each case runs as ``run_case.py`` does in the suite (issue 17's rows on asyncio,
issue 28's on asyncio and trio; 3 x 1 MiB strings for the value rows) with
``PYTHONMALLOC=malloc`` so valgrind sees every allocation.

Fails unless, in every run: no invalid read, write or free at all; no definitely lost block
whose stack passes through the bridge (our cffi extension, cffi, the reference library or
this tree); no uninitialised-value error in such a stack. ``valgrind.supp`` (next to this
file) suppresses only known reports of CPython and cffi themselves. Prints one summary line
per case and a total.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import refbuild

HERE = Path(__file__).resolve().parent
# row -> case (run_case.py)
ROWS = {
    1: "py_success_no_values",
    2: "py_stack_without_cleanup",
    3: "cpp_root_parallel_instance",
    4: "cpp_error_info",
    5: "cpp_sched_handles",
    6: "cpp_strings_echo",
    7: "cpp_int32_width",
    8: "cpp_placeholders",
    9: "cpp_arity",
    10: "cpp_mutex",
    11: "cpp_root_ids",
    12: "cpp_e2e",
}
# issue 28: the reference's own IAsyncTool::Handle and relinquish() over our scheduler's handles
ISSUE28 = ("cpp_handle_cancel", "cpp_relinquish", "cpp_relinquish_cancel")
# (label, case, backend): issue 17's rows on asyncio, issue 28's on both backends
CASES = [(f"row {row:2}", name, "asyncio") for row, name in ROWS.items()] + [
    ("issue 28", name, backend) for name in ISSUE28 for backend in ("asyncio", "trio")
]
INVALID = re.compile(
    r"^==\d+== (Invalid (read|write|free)|Mismatched free|Source and destination overlap"
    r"|Syscall param .* points to unaddressable)"
)
UNINIT = re.compile(r"^==\d+== (Use of uninitialised|Conditional jump or move depends)")
LOST = re.compile(r"^==\d+== ([\d,]+) bytes in [\d,]+ blocks are definitely lost")
OURS = re.compile(r"futoin_anyio|_ffi\.|_cffi_backend|libftnref|ref_cases|run_case")
SUMMARY = re.compile(r"definitely lost: ([\d,]+) bytes")


def blocks(log: str) -> list[list[str]]:
    out: list[list[str]] = []
    cur: list[str] = []
    for line in log.splitlines():
        if re.match(r"^==\d+== $", line):
            if cur:
                out.append(cur)
            cur = []
        elif line.startswith("=="):
            cur.append(line)
    if cur:
        out.append(cur)
    return out


def check(name: str, backend: str, lib: Path, work: Path) -> tuple[bool, str]:
    log_file = work / f"{name}-{backend}.log"
    cmd = [
        "valgrind",
        "--tool=memcheck",
        "--leak-check=full",
        "--show-leak-kinds=definite",
        "--num-callers=40",
        f"--suppressions={HERE / 'valgrind.supp'}",
        f"--log-file={log_file}",
        sys.executable,
        str(HERE / "run_case.py"),
        str(lib),
        name,
        backend,
    ]
    env = {**os.environ, "PYTHONMALLOC": "malloc", "FUTOIN_INTEROP_N": "3"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900, check=False)
    log = log_file.read_text()
    invalid = uninit_ours = uninit_other = lost_ours = 0
    lost_total = 0
    details: list[str] = []
    for blk in blocks(log):
        head = blk[0]
        ours = any(OURS.search(line) for line in blk[1:])
        if INVALID.match(head):
            invalid += 1
            details.append("\n".join(blk))
        elif UNINIT.match(head):
            if ours:
                uninit_ours += 1
                details.append("\n".join(blk))
            else:
                uninit_other += 1
        else:
            m = LOST.match(head)
            if m:
                lost_total += int(m.group(1).replace(",", ""))
                if ours:
                    lost_ours += int(m.group(1).replace(",", ""))
                    details.append("\n".join(blk))
    ok = proc.returncode == 0 and "RESULT " in proc.stdout and not details
    line = (
        f"{name} ({backend}): exit {proc.returncode}, invalid accesses {invalid}, "
        f"uninitialised in the bridge {uninit_ours} (elsewhere {uninit_other}), "
        f"definitely lost {lost_total} bytes (from the bridge {lost_ours})"
    )
    if not ok:
        line += "\n" + "\n\n".join(details[:5]) + "\n" + proc.stderr[-2000:]
    return ok, line


def main() -> int:
    if shutil.which("valgrind") is None:
        print("valgrind is not installed: apt-get install valgrind", file=sys.stderr)
        return 2
    where = refbuild.reference_dir()
    if where is None:
        print(f"set {refbuild.ENV} to the C++ reference sources", file=sys.stderr)
        return 2
    lib = refbuild.build(where)
    work = Path(tempfile.mkdtemp(prefix="futoin_anyio_memcheck-"))
    try:
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
            results = list(pool.map(lambda case: check(case[1], case[2], lib, work), CASES))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for (label, _name, _backend), (_ok, line) in zip(CASES, results, strict=True):
        print(f"{label}: {line}")
    failed = sum(1 for ok, _ in results if not ok)
    print(f"memcheck: {len(results) - failed}/{len(results)} cases clean")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
