"""The per-window diagnosis metrics, counted in plain numbers and exposed at scrape time.

An agent diagnoses a window every 85 ms or so, and every window counts once on three
metrics: ``faultfleet_windows_processed_total``, ``faultfleet_diagnoses_total{class_name}``
and the ``faultfleet_inference_latency_seconds`` histogram. Through prometheus_client's
objects that is five locked updates of five value objects per window, which cost as much
Python as the rest of the agent's bookkeeping together. :class:`DiagnosisCounts` keeps the
same numbers as a few ints and one float under one lock and is itself the collector that
turns them into the three metric families when the registry is scraped, so what a scrape
reads is always exact; nothing waits to be flushed. The exposition is the one the
prometheus_client objects gave: the same names, types, help, series, bucket bounds,
values, and ``_created`` timestamps unless ``PROMETHEUS_DISABLE_CREATED_SERIES`` turns
them off.
"""

from __future__ import annotations

import math
import os
import threading
import time
from bisect import bisect_left
from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

WINDOWS = "faultfleet_windows_processed_total"
DIAGNOSES = "faultfleet_diagnoses_total"
LATENCY = "faultfleet_inference_latency_seconds"
STREAK = "faultfleet_diagnosis_streak_windows"


def _go_float(value: float) -> str:
    """A bucket bound as prometheus_client writes its ``le`` label."""
    return str(floatToGoString(value))  # type: ignore[no-untyped-call]


def _created_series() -> bool:
    """Whether ``_created`` samples are exposed, as prometheus_client decides it."""
    flag = os.environ.get("PROMETHEUS_DISABLE_CREATED_SERIES", "False")
    return flag.lower() not in ("true", "1", "t")


class DiagnosisCounts:
    """Windows, diagnoses per class and inference latencies of an agent (or of the agents
    of one process); thread-safe, and the registry's collector of those three metrics.

    Parameters
    ----------
    registry : CollectorRegistry
        Where the three metrics are exposed.
    buckets : sequence of float
        Upper bounds of the latency histogram, seconds, increasing; ``+Inf`` is added.
    """

    def __init__(self, registry: CollectorRegistry, buckets: Sequence[float]) -> None:
        bounds = tuple(float(b) for b in buckets)
        if not bounds or list(bounds) != sorted(set(bounds)) or math.inf in bounds:
            raise ValueError(f"buckets {list(buckets)} must be finite, distinct and increasing")
        self._bounds = bounds
        self._le = (*(_go_float(b) for b in bounds), "+Inf")
        self._lock = threading.Lock()
        self._buckets = [0] * (len(bounds) + 1)
        """Calls per bucket (not cumulative); the last is above every bound."""
        self._sum = 0.0
        self._windows = 0
        self._by_id: list[int] = []
        """Diagnoses per class id of the current class names, since they were set."""
        self._names: tuple[str, ...] = ()
        self._by_name: dict[str, int] = {}
        """Diagnoses per class name before the current names were set; every name ever
        set, in the order first set (the order of the series)."""
        self._created_s = time.time()
        self._class_created_s: dict[str, float] = {}
        self._with_created = _created_series()
        registry.register(self)

    def set_class_names(self, names: tuple[str, ...]) -> None:
        """Count class ids as ``names`` from now on; new names get a series at 0."""
        with self._lock:
            for name, count in zip(self._names, self._by_id, strict=True):
                self._by_name[name] += count
            for name in names:
                if name not in self._by_name:
                    self._by_name[name] = 0
                    self._class_created_s[name] = time.time()
            self._names = names
            self._by_id = [0] * len(names)

    def observe_one(self, class_id: int, latency_s: float) -> None:
        """One window of class ``class_id`` (an index of the current names, checked by the
        caller) diagnosed by one call of ``latency_s`` seconds (finite, >= 0)."""
        bucket = bisect_left(self._bounds, latency_s)  # the first bound >= the latency
        with self._lock:
            self._by_id[class_id] += 1
            self._windows += 1
            self._buckets[bucket] += 1
            self._sum += latency_s

    def observe_batch(self, class_ids: Sequence[int], latency_s: float) -> None:
        """``len(class_ids)`` windows (ids checked by the caller, at least one) diagnosed
        by one call of ``latency_s`` seconds."""
        bucket = bisect_left(self._bounds, latency_s)
        with self._lock:
            for class_id in class_ids:
                self._by_id[class_id] += 1
            self._windows += len(class_ids)
            self._buckets[bucket] += 1
            self._sum += latency_s

    # -- the collector ---------------------------------------------------------------------

    def describe(self) -> list[Metric]:
        """The three families, without samples (the registry checks their names)."""
        return [
            CounterMetricFamily(WINDOWS, "Signal windows diagnosed."),
            HistogramMetricFamily(LATENCY, _LATENCY_HELP),
            CounterMetricFamily(DIAGNOSES, _DIAGNOSES_HELP, labels=["class_name"]),
        ]

    def collect(self) -> Iterator[Metric]:
        """The three families with the counts of this moment."""
        with self._lock:
            windows, total_s, buckets = self._windows, self._sum, list(self._buckets)
            by_name = dict(self._by_name)
            for name, count in zip(self._names, self._by_id, strict=True):
                by_name[name] += count
        created = self._created_s if self._with_created else None
        family = CounterMetricFamily(WINDOWS, "Signal windows diagnosed.")
        family.add_metric([], float(windows), created=created)
        yield family
        histogram = HistogramMetricFamily(LATENCY, _LATENCY_HELP)
        cumulative, running = [], 0
        for le, count in zip(self._le, buckets, strict=True):
            running += count
            cumulative.append((le, float(running)))
        histogram.add_metric([], cumulative, total_s)
        if created is not None:
            histogram.samples.append(Sample(LATENCY + "_created", {}, created))
        yield histogram
        family = CounterMetricFamily(DIAGNOSES, _DIAGNOSES_HELP, labels=["class_name"])
        for name, count in by_name.items():
            name_created = self._class_created_s[name] if self._with_created else None
            family.add_metric([name], float(count), created=name_created)
        yield family


class StreakGauge:
    """``faultfleet_diagnosis_streak_windows{class_name}``: the current streak's length for
    its class, 0 for every other class name; the registry's collector of it.

    The diagnosis thread sets :attr:`current` for every window (one assignment, no lock:
    the pair is replaced whole); a scrape reads it.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.names: dict[str, None] = {}
        """Every class name given a series, in the order first given."""
        self.current: tuple[str | None, int] = (None, 0)
        """The class of the current streak (None: none) and its windows."""
        registry.register(self)

    def add_names(self, names: Sequence[str]) -> None:
        """Give each of ``names`` a series (reading 0 unless it is the streak's class)."""
        for name in names:
            self.names.setdefault(name, None)

    def describe(self) -> list[Metric]:
        return [GaugeMetricFamily(STREAK, _STREAK_HELP, labels=["class_name"])]

    def collect(self) -> Iterator[Metric]:
        streak_class, windows = self.current
        family = GaugeMetricFamily(STREAK, _STREAK_HELP, labels=["class_name"])
        for name in list(self.names):
            family.add_metric([name], float(windows if name == streak_class else 0))
        yield family


_STREAK_HELP = (
    "Most recent windows in a row diagnosed as this class with at least the streak "
    "probability; 0 for every class but the current streak's."
)
_LATENCY_HELP = "Wall time of one ONNX Runtime call (one batch of windows)."
_DIAGNOSES_HELP = "Windows diagnosed, by the class the model predicted."
