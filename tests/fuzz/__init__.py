"""Differential fuzzing: random step programs run on asyncio, trio and the JS reference.

* :mod:`.program` — the program model (frozen dataclasses) and the hypothesis strategy.
* :mod:`.interp` — runs a program on futoin_anyio under virtual time and records its trace.
* :mod:`.js` — translates a program to JavaScript and runs it on npm ``futoin-asyncsteps``.
"""
