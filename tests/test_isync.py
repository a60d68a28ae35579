"""ISync is a runtime-checkable protocol: any object with a ``sync()`` method is one."""

from __future__ import annotations

from typing import Any

import pytest

from futoin_anyio import AsyncSteps, ISync, Limiter, Mutex, Throttle


class _Gate:
    """A user's own ISync: lets every entry straight through, counting them."""

    def __init__(self) -> None:
        self.entries = 0

    def sync(self, asi: AsyncSteps, func: Any, onerror: Any = None) -> None:
        self.entries += 1
        asi.add(func, onerror)


def test_the_primitives_and_a_users_class_are_isync() -> None:
    assert isinstance(Mutex(), ISync)
    assert isinstance(Throttle(1), ISync)
    assert isinstance(Limiter(), ISync)
    assert isinstance(_Gate(), ISync)


@pytest.mark.parametrize("obj", [object(), 42, "sync", {"sync": None}])
def test_objects_without_sync_are_not_isync(obj: object) -> None:
    assert not isinstance(obj, ISync)


@pytest.mark.anyio
async def test_a_users_isync_runs_in_asi_sync() -> None:
    gate = _Gate()
    asi = AsyncSteps()
    asi.add(lambda asi: asi.success(20))
    asi.sync(gate, lambda asi, v: asi.success(v + 1))
    assert await asi.promise() == 21
    assert gate.entries == 1
