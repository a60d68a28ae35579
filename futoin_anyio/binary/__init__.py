"""FTN12 universal binary interface (section 2.7) through cffi.

The C header with the spec's declarations ships in this package::

    cc -I"$(python -c 'import futoin_anyio.binary as b; print(b.get_include())')" ...

and ``#include "futoin.h"`` gives ``FutoInAsyncSteps``, ``FutoInArgs``,
``FutoInBinaryValue``, ``FutoInSync`` and friends, from C11 or C++11.
"""

from __future__ import annotations

import os

__all__ = ("get_include",)


def get_include() -> str:
    """Return the folder holding ``futoin.h``, for a compiler's ``-I`` option.

    Like :func:`numpy.get_include`, it points inside the installed package.
    """
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "include")
