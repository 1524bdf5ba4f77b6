"""Resident memory of long-running processes over time: samples, trend and verdict.

Used by ``bench_soak.py``. :func:`vmrss_mb` reads a process's resident set size from
``/proc/<pid>/status`` (``VmRSS``, Linux); :class:`RssSampler` keeps one series of
(seconds since the start, MB) per named process; :func:`rss_trend` summarises a series
after its warm-up: the first and last samples, the largest, the least-squares slope in MB
per hour and a verdict, ``flat`` or ``growing``.

The slope is the ordinary least-squares fit ``rss ≈ a + b·t`` over the samples taken after
the warm-up, ``b = Σ (t - t̄)(r - r̄) / Σ (t - t̄)²``, converted from MB per second to MB
per hour. Fitting every sample, rather than comparing the first with the last, keeps one
garbage collection or one model swap at either end from deciding the verdict.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

KB_PER_MB = 1024.0
SECONDS_PER_HOUR = 3600.0
PROC = Path("/proc")


def vmrss_mb(pid: int, proc: Path = PROC) -> float | None:
    """Resident set size of process ``pid`` in MB (``VmRSS``); None if it is gone."""
    try:
        status = (proc / str(pid) / "status").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / KB_PER_MB  # "VmRSS:   123456 kB"
    return None  # a zombie has no VmRSS line


def slope_per_hour(times_s: Sequence[float], values: Sequence[float]) -> float:
    """Least-squares slope of ``values`` against ``times_s`` (seconds), per hour.

    Raises
    ------
    ValueError
        Fewer than two samples, lengths that differ, or all samples at one time.
    """
    if len(times_s) != len(values):
        raise ValueError(f"{len(times_s)} times for {len(values)} values; give one per sample")
    if len(times_s) < 2:
        raise ValueError(f"a slope needs at least 2 samples, got {len(times_s)}")
    mean_t = sum(times_s) / len(times_s)
    mean_v = sum(values) / len(values)
    spread = sum((t - mean_t) ** 2 for t in times_s)
    if spread == 0:
        raise ValueError("every sample was taken at the same time; sample over a duration")
    covariance = sum((t - mean_t) * (v - mean_v) for t, v in zip(times_s, values, strict=True))
    return covariance / spread * SECONDS_PER_HOUR


@dataclass
class RssSeries:
    """The samples of one process: seconds since the start and RSS in MB."""

    name: str
    pid: int
    times_s: list[float] = field(default_factory=list)
    rss_mb: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class RssTrend:
    """What one process's samples after the warm-up say.

    Attributes
    ----------
    start_mb, end_mb, max_mb : float
        First sample after the warm-up, last sample, largest sample after the warm-up.
    slope_mb_per_hour : float
        Least-squares slope after the warm-up.
    verdict : {"flat", "growing", "unknown"}
        ``growing`` when the slope reaches the threshold; ``unknown`` with fewer than two
        samples after the warm-up.
    """

    name: str
    pid: int
    samples: int
    start_mb: float
    end_mb: float
    max_mb: float
    slope_mb_per_hour: float
    verdict: str


def rss_trend(series: RssSeries, *, warm_up_s: float, growing_mb_per_hour: float) -> RssTrend:
    """Summarise ``series`` from ``warm_up_s`` on; ``growing`` from ``growing_mb_per_hour``."""
    kept = [(t, r) for t, r in zip(series.times_s, series.rss_mb, strict=True) if t >= warm_up_s]
    if not kept:
        nan = float("nan")
        return RssTrend(series.name, series.pid, 0, nan, nan, nan, nan, "unknown")
    times, values = [t for t, _ in kept], [r for _, r in kept]
    if len(kept) < 2 or times[0] == times[-1]:
        slope, verdict = float("nan"), "unknown"
    else:
        slope = slope_per_hour(times, values)
        verdict = "growing" if slope >= growing_mb_per_hour else "flat"
    return RssTrend(
        series.name, series.pid, len(kept), values[0], values[-1], max(values), slope, verdict
    )


class RssSampler:
    """Samples the RSS of named processes; one :class:`RssSeries` each.

    Parameters
    ----------
    processes : mapping name → pid
    read_mb : callable
        ``pid → MB or None`` (:func:`vmrss_mb`; a fake in tests).
    """

    def __init__(
        self, processes: dict[str, int], read_mb: Callable[[int], float | None] = vmrss_mb
    ) -> None:
        self.series = {name: RssSeries(name, pid) for name, pid in processes.items()}
        self.read_mb = read_mb

    def sample(self, elapsed_s: float) -> list[str]:
        """Take one sample of every process at ``elapsed_s``; the names of those gone."""
        gone = []
        for series in self.series.values():
            value = self.read_mb(series.pid)
            if value is None:
                gone.append(series.name)
                continue
            series.times_s.append(elapsed_s)
            series.rss_mb.append(value)
        return gone

    def trends(self, *, warm_up_s: float, growing_mb_per_hour: float) -> list[RssTrend]:
        """:func:`rss_trend` of every process, in the order they were named."""
        return [
            rss_trend(s, warm_up_s=warm_up_s, growing_mb_per_hour=growing_mb_per_hour)
            for s in self.series.values()
        ]
