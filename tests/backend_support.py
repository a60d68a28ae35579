"""Where a ``promise()``'s parallel branches run on the running backend."""

from __future__ import annotations

import sys

import sniffio


def first_branch_inline() -> bool:
    """Does the first coroutine branch of a ``promise()`` to start run in the caller's task?

    On trio always; on asyncio from Python 3.12, whose tasks tell their context (the other
    branches' plain steps run in it meanwhile: see ``_Driver._start_coroutine``).
    """
    return sniffio.current_async_library() == "trio" or sys.version_info >= (3, 12)
