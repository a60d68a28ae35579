"""A flow's stack keeps its room for four frames: no step pushed or popped resizes it.

CPython's list gives room back (a realloc) on a pop that leaves it under half full, and a list
grown from one item makes room for eight: a loop's body at depth four would realloc the stack
once per iteration. ``_Flow.__init__`` makes the stack with room for four, which pops down to
two keep (a cost the benchmarks count; this test only checks the room is there and stays).
"""

from __future__ import annotations

import sys

import pytest

from futoin_anyio import AsyncSteps

pytestmark = pytest.mark.anyio

ROOM_OF_FOUR = sys.getsizeof([None] * 4)


async def test_steps_up_to_depth_four_never_resize_the_stack() -> None:
    seen: list[tuple[str, int, int]] = []

    def look(where: str, asi: AsyncSteps) -> None:
        stack = asi._flow.stack  # type: ignore[union-attr]
        seen.append((where, len(stack), sys.getsizeof(stack)))

    def outer(asi: AsyncSteps) -> None:
        look("outer", asi)
        asi.repeat(3, lambda asi, i: look("body", asi))

    root = AsyncSteps()
    root.add(outer)
    root.add(lambda asi: look("next", asi))
    root.add(lambda asi: asi.parallel().add(lambda asi: look("branch", asi)))
    await root.promise()
    assert seen == [("outer", 2, ROOM_OF_FOUR)] + [("body", 4, ROOM_OF_FOUR)] * 3 + [
        ("next", 2, ROOM_OF_FOUR), ("branch", 2, ROOM_OF_FOUR)]
