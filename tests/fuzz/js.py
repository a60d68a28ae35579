"""Translate a fuzz :class:`~.program.Program` to JavaScript; run it on ``futoin-asyncsteps``.

One ``node`` process (:class:`NodeRunner`) evaluates many programs: each is sent as one JSON line
of JavaScript source and answered with one JSON line holding its trace and outcome. Programs run
on a virtual-time AsyncTool (``VTool`` in :data:`HARNESS`), the JS twin of the virtual clocks the
Python side uses, so traces carry the same times.

Translation rules (each one mirrors a deliberate difference of our semantics,
docs/semantics.rst, from the reference; see the test module):

* R2: a plain Python exception (``raise ValueError``) becomes ``throw new Error("InternalError")``:
  in JS the error code is the thrown ``Error``'s message; in Python any non-FutoIn exception
  reaches the handlers as ``InternalError``.
* R4: ``success_step(*args)`` becomes ``add((as) => as.success(...args))``: the reference's
  ``successStep()`` adds no step when the queue is empty (it sets the next step's arguments), so a
  step with a timeout or a cancel handler whose only sub-step is a ``successStep`` *waits* in JS;
  ours (docs/semantics.rst, "Callbacks"): ``success_step`` adds a step.
* R5: each parallel branch starts with a step that waits for one immediate callback. The
  reference loses the error of a branch that fails synchronously while ``executeParallel()`` is
  still starting the branches (``ParallelStep._error`` calls ``as.error()`` while the parent root
  is ``_in_exec``: it only throws, and ``_error`` swallows it), so the parallel step then hangs.
  The gate makes every branch start after ``executeParallel()`` returned, without changing the
  order in which branches run.
* R6: an external completion aimed at a step that has failed is ignored. In futoin_anyio the
  error handler gets a fresh step object and the failed one is out of service (``bool(asi)`` is
  false); the reference passes the failed step's own object to its handler, so a late
  ``error()``/``success()`` on it still finds it in service while the handler's steps run, and
  fails the root with InternalError ("Invalid call (sanity check)"). The translated handler
  marks the failed step dead, and its pending completion checks the mark.
* R3: ``repeat(0)`` / ``for_each`` over nothing becomes a step that succeeds with no arguments:
  JS adds no step at all (so the previous step's arguments pass through), while docs/semantics.rst,
  "Loops", says a loop that ends normally succeeds with no arguments.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from .program import LIMIT, Fail, Handler, Jump, Loop, Node, Par, Program, Step, Sub, Succeed, Wait

HARNESS = r"""
'use strict';
const path = require('path');
const readline = require('readline');
const AsyncSteps = require(path.join(process.argv[2], 'AsyncSteps'));

class VTool {
    constructor() {
        this.now = 0; this.seq = 0; this.q = [];
        // The reference destructures its tool's functions: bind them.
        for (const k of ['callLater', 'cancelCall', 'callImmediate', 'cancelImmediate']) {
            this[k] = this[k].bind(this);
        }
    }
    callLater(f, ms) {
        const e = { t: this.now + (ms || 0), s: this.seq++, f, dead: false };
        let i = this.q.length;
        const after = (o) => o.t > e.t || (o.t === e.t && o.s > e.s);
        while (i > 0 && after(this.q[i - 1])) --i;
        this.q.splice(i, 0, e);
        return e;
    }
    cancelCall(e) { if (e) e.dead = true; }
    callImmediate(f) { return this.callLater(f, 0); }
    cancelImmediate(e) { if (e) e.dead = true; }
    run(limit, R) {
        while (this.q.length) {
            const e = this.q.shift();
            if (e.dead) continue;
            if (e.t >= limit) break;
            this.now = e.t;
            try {
                e.f();
            } catch (err) {
                R.trace.push(['js-exception', String(err && err.message), this.now]);
            }
        }
    }
}

const rl = readline.createInterface({ input: process.stdin });
rl.on('line', (line) => {
    const req = JSON.parse(line);
    const tool = new VTool();
    const R = {
        trace: [],
        rec(...ev) { if (tool.now < req.limit) this.trace.push([...ev, tool.now]); },
    };
    let outcome;
    try {
        const prog = new Function('AsyncSteps', 'tool', 'R', req.src);
        outcome = prog(AsyncSteps, tool, R);
        tool.run(req.limit, R);
        outcome = outcome();
    } catch (err) {
        outcome = ['js-crash', String(err && err.stack)];
    }
    process.stdout.write(JSON.stringify({ trace: R.trace, outcome }) + '\n');
});
"""


def _lit(value: Any) -> str:
    return "undefined" if value is None else json.dumps(value)


def _args(args: tuple[int, ...]) -> str:
    return ", ".join(str(a) for a in args)


class _Translator:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def nodes(self, asi: str, nodes: tuple[Node, ...]) -> str:
        out = []
        for node in nodes:
            if isinstance(node, Step):
                out.append(f"{asi}.add({self.step(node)}, {self.handler(node.onerror)});")
            else:
                # R4: not successStep(): with an empty queue it adds no step in JS.
                out.append(f"{asi}.add((as) => {{ as.success({_args(node.args)}); }});")
        return "\n".join(out)

    def step(self, node: Step) -> str:
        parts = [f"R.rec('step', {node.id}, args);"]
        if node.oncancel:
            parts.append(f"as.setCancel((a) => R.rec('cancel', {node.id}));")
        if node.timeout is not None:
            parts.append(f"as.setTimeout({node.timeout});")
        parts.append(self.body(node))
        return "(as, ...args) => {\n" + "\n".join(parts) + "\n}"

    def handler(self, h: Handler | None) -> str:
        if h is None:
            return "undefined"
        parts = [
            "if (as._fzTok) as._fzTok.dead = true;",  # R6
            f"R.rec('onerror', {h.id}, err, "
            "err === 'InternalError' ? null : (as.state.error_info ?? null));",
        ]
        if h.kind == "recover":
            parts.append(f"as.success({_args(h.args)});")
        elif h.kind == "replace":
            parts.append(f"as.error({_lit(h.code)}, {_lit(f'h{h.id}')});")
        elif h.kind == "add":
            parts.append(self.nodes("as", h.steps))
        elif h.kind == "raise":
            parts.append("throw new Error('InternalError');")  # R2
        return "(as, err) => {\n" + "\n".join(parts) + "\n}"

    def body(self, node: Step) -> str:
        b = node.body
        if isinstance(b, Succeed):
            return "" if b.args is None else f"as.success({_args(b.args)});"
        if isinstance(b, Fail):
            if b.raise_exc:
                return "throw new Error('InternalError');"  # R2
            return f"as.error({_lit(b.code)}, {_lit(f'i{node.id}')});"
        if isinstance(b, Wait):
            wait = "" if node.oncancel else "as.waitExternal();\n"
            if b.ok:
                done = f"as.success({_args(b.args)});"
            else:
                done = f"try {{ as.error({_lit(b.code)}, {_lit(f'w{node.id}')}); }} catch (e) {{}}"
            # A step object that went out of service has its state cleared by the reference;
            # one that failed and is in its error handler is marked dead by the handler (R6).
            tok = "const tok = { dead: false };\nas._fzTok = tok;\n"
            cb = f"() => {{ if (!as.state || tok.dead) return; {done} }}"
            if b.ms is None:
                return f"{wait}{tok}tool.callImmediate({cb});"
            return f"{wait}{tok}tool.callLater({cb}, {b.ms});"
        if isinstance(b, Sub):
            return self.nodes("as", b.children)
        if isinstance(b, Par):
            # R5: each branch starts behind an immediate (see the module docstring).
            branches = "".join(
                f".add((as) => {{ as.add(_gate); as.add({self.step(s)}, {self.handler(s.onerror)});"
                " })" for s in b.branches)
            return f"as.parallel({self.handler(b.onerror)}){branches};"
        if isinstance(b, Loop):
            return self.loop(b)
        assert isinstance(b, Jump)
        return f"as.{'break' if b.brk else 'continue'}({_lit(b.label)});"

    def loop(self, lp: Loop) -> str:
        if lp.kind != "loop" and lp.n == 0:
            return "as.add((as) => {});"  # R3
        head = f"R.rec('iter', {lp.id}, args);"
        if lp.kind == "loop":
            head += f"\nif (C[{lp.id}]++ >= {lp.n}) as.break();"
        fn = f"(as, ...args) => {{\n{head}\n{self.nodes('as', lp.body)}\n}}"
        label = _lit(lp.label)
        if lp.kind == "loop":
            return f"C[{lp.id}] = 0;\nas.loop({fn}, {label});"
        if lp.kind == "repeat":
            return f"as.repeat({lp.n}, {fn}, {label});"
        if lp.mapping:
            coll = json.dumps({f"k{i}": 10 + i for i in range(lp.n)})
        else:
            coll = json.dumps([10 + i for i in range(lp.n)])
        return f"as.forEach({coll}, {fn}, {label});"


def translate(program: Program) -> str:
    """JavaScript source of the function body that runs ``program`` (see :data:`HARNESS`).

    The program's steps run inside one wrapper step whose error handler records an unhandled
    error; a last step records success (the reference's ``execute()`` reports neither).
    """
    t = _Translator()
    cancel = ""
    if program.cancel_at is not None:
        cancel = (f"tool.callLater(() => {{ if (!outcome) {{ R.rec('cancel-root'); "
                  f"cancelled = true; root.cancel(); }} }}, {program.cancel_at});")
    return f"""
const C = {{}};
const _gate = (as) => {{
    as.waitExternal();
    tool.callImmediate(() => {{ if (as.state) as.success(); }});
}};
let outcome = null;
let cancelled = false;
const root = new AsyncSteps(null, tool);
root.add((as) => {{
{t.nodes("as", program.steps)}
}}, (as, err) => {{
outcome = ['error', err, err === 'InternalError' ? null : (as.state.error_info ?? null)];
}});
root.add((as, ...args) => {{ outcome = ['ok', args]; }});
{cancel}
root.execute();
return () => outcome || (cancelled ? ['cancelled'] : ['pending']);
"""


class NodeRunner:
    """One ``node`` process that runs translated programs on the reference implementation."""

    def __init__(self, package_dir: Path, workdir: Path) -> None:
        script = workdir / "fuzz_harness.js"
        script.write_text(HARNESS)
        env = dict(os.environ, NODE_ENV="development")
        self._proc = subprocess.Popen(
            ["node", str(script), str(package_dir)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
        )

    def run(self, program: Program) -> tuple[list[Any], list[Any]]:
        """Run ``program``; return its (trace, outcome)."""
        proc = self._proc
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps({"src": translate(program), "limit": LIMIT}) + "\n")
        proc.stdin.flush()
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"node exited with {proc.wait()}")
        answer = json.loads(line)
        return answer["trace"], answer["outcome"]

    def close(self) -> None:
        proc = self._proc
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()


def _groups(node: Step) -> list[tuple[tuple[Node, ...], bool]]:
    """The node lists inside ``node``, each with whether it is a parallel's branches."""
    b = node.body
    out: list[tuple[tuple[Node, ...], bool]] = []
    if isinstance(b, Sub):
        out.append((b.children, False))
    elif isinstance(b, Par):
        out.append((b.branches, True))
        if b.onerror is not None:
            out.append((b.onerror.steps, False))
    elif isinstance(b, Loop):
        out.append((b.body, False))
    if node.onerror is not None:
        out.append((node.onerror.steps, False))
    return out


def _has_nested_par(nodes: tuple[Node, ...], in_par: bool = False) -> bool:
    for node in nodes:
        if isinstance(node, Step):
            if in_par and isinstance(node.body, Par):
                return True
            if any(_has_nested_par(group, in_par or branches)
                   for group, branches in _groups(node)):
                return True
    return False


def static_skip_reason(program: Program) -> str | None:
    """Why ``program``'s JS trace may legitimately order same-instant events differently, if so.

    N3: a parallel nested in a parallel branch. R5's gate starts every branch two immediate
    callbacks later than ``executeParallel()`` would, so nested branches start later, relative
    to their parent's siblings, than in Python (which runs new branches in the same scheduler
    pass). And the reference completes a parallel step synchronously when its last branch ends,
    where Python resumes the parent flow one scheduler hop later. Either way, a sibling that fails
    at the same instant may find a nested branch, or its parent step, at a different point.
    """
    if _has_nested_par(program.steps):
        return "N3"
    return None
