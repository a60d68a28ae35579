# pyright: strict
"""A typed user program: ``tests/test_typing.py`` checks it with ``mypy --strict`` and pyright
(strict, every ``reportUnknown*`` on). It is never run by pytest (no ``test_`` prefix); it is
run once by the typing test to show it works as typed."""

from __future__ import annotations

import anyio
import anyio.lowlevel

from futoin_anyio import AsyncSteps, Errors, FutoInError, Limiter, promise_as


def fetch(asi: AsyncSteps) -> None:
    # asi.tool is an AsyncTool inside a step: no None to assert away.
    asi.tool.deferred(1, lambda: asi.success(20))
    asi.wait_external()


def validated(asi: AsyncSteps, value: int) -> int:
    if value >= 0:
        return value
    asi.error(Errors.InvalidRequest, "negative")  # NoReturn: no "missing return statement"


def check(asi: AsyncSteps, value: int) -> None:
    asi.success(validated(asi, value))


def on_error(asi: AsyncSteps, code: str) -> None:
    if code == Errors.Timeout:
        asi.success(0)


async def double(asi: AsyncSteps, value: int) -> int:
    await anyio.lowlevel.checkpoint()
    return value * 2


def count_to_three(asi: AsyncSteps) -> None:
    def body(asi: AsyncSteps) -> None:
        asi.state.n += 1
        if asi.state.n >= 3:
            asi.break_loop()  # NoReturn

    asi.state.n = 0
    asi.loop(body)
    asi.repeat(2, lambda asi, i: asi.state.seen.append(i))
    asi.for_each({"a": 1}, lambda asi, key, value: asi.state.pairs.append((key, value)))


def gather(asi: AsyncSteps) -> None:
    limiter = Limiter(concurrent=2)
    (asi.parallel(results="parts")
        .add(lambda asi: asi.success(1))
        .add(lambda asi: asi.success(2))
        .sync(limiter, lambda asi: asi.success(3)))


def total(asi: AsyncSteps, parts: list[int]) -> None:
    asi.success(sum(parts))


async def main() -> int:
    root = AsyncSteps()
    root.state.seen = []
    root.state.pairs = []
    root.add(fetch, on_error)
    root.add(check)
    root.add(double)
    root.add(lambda asi, value: asi.success(value + 1))
    root.add(lambda asi, value: asi.state.update(v=value))
    root.add(count_to_three)
    root.add(gather)
    root.add(total)
    result: int = await promise_as(root, int)

    typed_lambda = AsyncSteps()
    typed_lambda.add(lambda asi: asi.success("text"))
    text: str = await promise_as(typed_lambda, str)

    failing = AsyncSteps()
    failing.add(lambda asi: asi.error(Errors.NotImplemented))
    try:
        await failing.promise()
    except FutoInError as err:
        assert err.code == Errors.NotImplemented
    return result + len(text)


if __name__ == "__main__":
    print(anyio.run(main))
