"""The Redis benchmark's harness still runs, and every run verifies its invariants.

A short run of every row (4 OS processes each, on the session's redis-server): this checks
that the figures ``python -m benchmarks.redis_bench`` would print come from runs whose
invariants hold (no overlapping holders, no rejected entry, the rate never exceeded), never
how fast they are.
"""

from __future__ import annotations

import math

import pytest
from redis_support.server import RedisServer

pytest.importorskip("coredis")
pytest.importorskip("redis")
pytest.importorskip("limits")

from benchmarks import redis_bench


def test_quick_run_verifies_invariants(redis_server: RedisServer,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    figures = redis_bench.measure(redis_server.port, ["mutex", "limiter"], 0.3, 200)
    assert redis_bench.check(figures) == []
    for key in redis_bench.MUTEX_RUNS:
        f = figures[key]
        assert f["entries"] > 0 and f["overlaps"] == 0, (key, f)
        assert f["cpu_ms"] > 0, (key, f)
    for key in ("RedisMutex(1)", "floor: BLPOP/RPUSH ring", "floor: ring via redis-py"):
        # FIFO and the ring: every entry after the first is a hand-off to another process.
        f = figures[key]
        assert f["entries"] > 4 and math.isfinite(f["p99_ms"]), (key, f)
        assert f["handoffs_per_s"] == pytest.approx(f["per_s"], rel=0.2), (key, f)
    for key in redis_bench.LIMITER_RUNS:
        assert figures[key]["entries"] > 0, (key, figures[key])
    for key in ("RedisLimiter", "RedisThrottle"):
        assert figures[key]["rejected"] == 0
        assert figures[key]["worst_1s"] <= 200 + 10, (key, figures[key])
    redis_bench.report(figures)
    out = capsys.readouterr().out
    assert "RedisMutex / redis-py Lock (sleep=0.1)" in out
    assert "control: RedisMutex(32)" in out


def test_check_reports_broken_invariants() -> None:
    good = {"entries": 10, "overlaps": 0}
    figures = {"rate": 100, "RedisMutex(1)": {"entries": 10, "overlaps": 2},
               "floor: BLPOP/RPUSH ring": good,
               "RedisLimiter": {"entries": 10, "rejected": 1, "worst_1s": 100},
               "RedisThrottle": {"entries": 10, "rejected": 0, "worst_1s": 106}}
    bad = redis_bench.check(figures)
    assert len(bad) == 3
    assert "2 overlapping holders" in bad[0]
    assert "1 rejected" in bad[1]
    assert "106 entries in 1 s" in bad[2]


def test_rounds_alternate_and_summarise(redis_server: RedisServer,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    ours, floor = redis_bench.PAIR
    pairs = redis_bench.alternate(redis_server.port, 2, 0.3, 200)
    assert len(pairs) == 2
    for pair in pairs:
        assert set(pair) == {ours, floor}
        for f in pair.values():
            assert f["entries"] > 4 and f["overlaps"] == 0, f
    redis_bench.report({"duration": 0.3, "rate": 200, "rounds": pairs})
    out = capsys.readouterr().out
    assert "2 pairs of runs back to back" in out and "median:" in out


def test_rounds_summary_is_the_median_of_pairs() -> None:
    ours, floor = redis_bench.PAIR

    def pair(a: float, b: float, pa: float, pb: float) -> dict[str, dict[str, float]]:
        return {ours: {"handoffs_per_s": a, "p99_ms": pa},
                floor: {"handoffs_per_s": b, "p99_ms": pb}}

    pairs = [pair(800, 1000, 3.0, 2.0), pair(900, 600, 2.0, 8.0), pair(500, 1000, 9.0, 1.0)]
    summary = redis_bench.rounds_summary(pairs)
    assert summary["ratio"] == pytest.approx(0.8)  # of 0.8, 1.5, 0.5
    assert summary["ours_p99_ms"] == 3.0 and summary["floor_p99_ms"] == 2.0
    assert redis_bench.rounds_summary(pairs[:2])["ratio"] == pytest.approx((0.8 + 1.5) / 2)


def test_rounds_must_not_be_negative(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        redis_bench.main(["--rounds", "-1"])
    assert exit_info.value.code == 2
    assert "--rounds must be 0 or more, not -1" in capsys.readouterr().err


def test_rounds_need_the_mutex_runs(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        redis_bench.main(["--rounds", "2", "--only", "limiter"])
    assert exit_info.value.code == 2
    assert "--rounds pairs mutex runs" in capsys.readouterr().err
