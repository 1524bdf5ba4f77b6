"""``benchmarks/soak_memory.py``: the soak's RSS samples, slope and verdict, on fake samples."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
from soak_memory import RssSampler, RssSeries, rss_trend, slope_per_hour, vmrss_mb


def _series(values: list[float], step_s: float = 60.0) -> RssSeries:
    return RssSeries("p", 1, [i * step_s for i in range(len(values))], values)


def test_the_slope_of_a_line_is_its_growth_per_hour() -> None:
    # Prepare: 100 MB growing 12 MB an hour, sampled every minute for two hours
    times = [60.0 * i for i in range(121)]
    values = [100 + 12 * t / 3600 for t in times]

    # Execute / Assert
    assert slope_per_hour(times, values) == pytest.approx(12.0)


def test_noise_around_a_level_is_flat_and_growth_is_growing() -> None:
    # Prepare: ±3 MB of alternating noise around 300 MB; the same with 20 MB/h added
    noisy = [300.0 + (3 if i % 2 else -3) for i in range(61)]
    leaking = [v + 20 * i / 60 for i, v in enumerate(noisy)]

    # Execute
    flat = rss_trend(_series(noisy), warm_up_s=0, growing_mb_per_hour=5)
    growing = rss_trend(_series(leaking), warm_up_s=0, growing_mb_per_hour=5)

    # Assert
    assert flat.verdict == "flat"
    assert abs(flat.slope_mb_per_hour) < 1
    assert growing.verdict == "growing"
    assert growing.slope_mb_per_hour == pytest.approx(20, abs=1)
    assert (growing.start_mb, growing.end_mb) == (297, 317)
    assert growing.max_mb == pytest.approx(303 + 20 * 59 / 60)


def test_the_warm_up_is_left_out_of_start_and_slope() -> None:
    # Prepare: 50 MB while starting, then 400 MB for an hour (torch loaded at the first task)
    series = _series([50.0] * 5 + [400.0] * 61)

    # Execute
    trend = rss_trend(series, warm_up_s=5 * 60, growing_mb_per_hour=5)

    # Assert
    assert trend.samples == 61
    assert (trend.start_mb, trend.end_mb, trend.slope_mb_per_hour) == (400, 400, 0)
    assert trend.verdict == "flat"


def test_too_few_samples_after_the_warm_up_give_no_verdict() -> None:
    trend = rss_trend(_series([10.0, 20.0]), warm_up_s=60, growing_mb_per_hour=5)
    assert (trend.samples, trend.verdict) == (1, "unknown")
    assert math.isnan(trend.slope_mb_per_hour)
    assert rss_trend(_series([]), warm_up_s=0, growing_mb_per_hour=5).verdict == "unknown"


@pytest.mark.parametrize(
    ("times", "values", "message"),
    [
        ([0.0], [1.0], "at least 2 samples"),
        ([0.0, 1.0], [1.0], "2 times for 1 values"),
        ([5.0, 5.0], [1.0, 2.0], "same time"),
    ],
)
def test_a_slope_needs_samples_over_a_duration(
    times: list[float], values: list[float], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        slope_per_hour(times, values)


def test_vmrss_is_read_from_proc_status(tmp_path: Path) -> None:
    # Prepare: a fake /proc with a live process and a zombie (no VmRSS line)
    (tmp_path / "12").mkdir()
    (tmp_path / "12" / "status").write_text("Name:\tpython\nVmRSS:\t  307200 kB\nThreads:\t9\n")
    (tmp_path / "13").mkdir()
    (tmp_path / "13" / "status").write_text("Name:\tpython\nState:\tZ (zombie)\n")

    # Execute / Assert
    assert vmrss_mb(12, proc=tmp_path) == 300.0
    assert vmrss_mb(13, proc=tmp_path) is None
    assert vmrss_mb(14, proc=tmp_path) is None
    own = vmrss_mb(os.getpid())  # the real /proc
    assert own is not None
    assert own > 1


def test_the_sampler_keeps_one_series_per_process_and_reports_those_gone() -> None:
    # Prepare: process 2 exits after the second sample
    readings: dict[int, list[float | None]] = {1: [100.0, 101.0, 102.0], 2: [50.0, 51.0, None]}
    sampler = RssSampler(
        {"coordinator": 1, "agents-0": 2}, read_mb=lambda pid: readings[pid].pop(0)
    )

    # Execute
    gone = [sampler.sample(elapsed) for elapsed in (0.0, 30.0, 60.0)]

    # Assert
    assert gone == [[], [], ["agents-0"]]
    assert sampler.series["coordinator"].rss_mb == [100.0, 101.0, 102.0]
    assert sampler.series["agents-0"].times_s == [0.0, 30.0]
    trends = sampler.trends(warm_up_s=0, growing_mb_per_hour=5)
    assert [t.name for t in trends] == ["coordinator", "agents-0"]
    assert trends[0].slope_mb_per_hour == pytest.approx(120.0)
