"""What ``contextvars`` a step sees and where its changes go (the table in docs/trio.rst).

Context follows the task: inline steps share the caller's; a task of its own (a parallel
branch's ``async def`` step) gets a copy; ``execute()`` roots run in the AsyncTool's task.
"""

from __future__ import annotations

import contextvars

import pytest

from futoin_anyio import AsyncSteps, AsyncTool

pytestmark = pytest.mark.anyio

var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")


async def test_inline_steps_share_the_callers_context() -> None:
    seen: list[str] = []

    async def sets(asi: AsyncSteps) -> None:
        var.set("set by a step")

    async def reads(asi: AsyncSteps) -> None:
        seen.append(var.get())

    await AsyncSteps().add(sets).add(lambda asi: seen.append(var.get())).add(reads).promise()
    assert seen == ["set by a step", "set by a step"]
    assert var.get() == "set by a step"  # the caller's own context


async def test_a_branch_task_gets_a_copy_of_the_callers_context() -> None:
    seen: list[str] = []
    var.set("caller")

    async def sets(asi: AsyncSteps) -> None:
        seen.append(var.get())
        var.set("branch")

    async def reads(asi: AsyncSteps) -> None:
        seen.append(var.get())

    def branch(asi: AsyncSteps) -> None:
        asi.add(sets).add(reads)

    def two_branches(asi: AsyncSteps) -> None:
        asi.parallel().add(branch).add(lambda asi: asi.add(reads))

    await AsyncSteps().add(two_branches).add(reads).promise()
    # Every branch step sees the caller's value; what one sets stays in its own task: neither
    # the branch's next step nor the step after the parallel sees it.
    assert seen == ["caller"] * 4
    assert var.get() == "caller"


async def test_executed_roots_see_the_context_of_the_tool_block() -> None:
    seen: list[str] = []

    async def reads(asi: AsyncSteps) -> None:
        seen.append(var.get())

    var.set("at the tool's entry")
    async with AsyncTool():
        var.set("at execute()")
        AsyncSteps().add(lambda asi: seen.append(var.get())).add(reads).execute()
    assert seen == ["at the tool's entry", "at the tool's entry"]
    assert var.get() == "at execute()"
