"""Scrape a registry the way Prometheus does, for the metrics tests of both services."""

from __future__ import annotations

import re

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

BASE_UNITS = ("seconds", "bytes", "ratio", "agents")
NOT_BASE_UNITS = re.compile(r"_(ms|milliseconds|minutes|hours|kb|mb|kib|mib|percent)(_|$)")
NAME = re.compile(r"faultfleet_[a-z]+(_[a-z]+)*")
NAME_PREFIX = "faultfleet_"
STANDARD_FAMILIES = {
    "process_cpu_seconds_total": "counter",
    "process_resident_memory_bytes": "gauge",
    "process_start_time_seconds": "gauge",
    "process_open_fds": "gauge",
    "python_info": "gauge",
    "python_gc_collections_total": "counter",
}
"""Families of the standard collectors every service registers (a Linux selection)."""


def all_types(registry: CollectorRegistry) -> dict[str, str]:
    """Name -> type of every metric the registry holds (counters named with ``_total``).

    The exposition also carries a ``<name>_created`` timestamp gauge per counter and
    histogram; those are prometheus_client's, not ours, so they are read from the metric
    families rather than the text. Besides faultfleet's own metrics this includes the
    standard ``process_*`` and ``python_*`` collectors.
    """
    return {
        family.name + ("_total" if family.type == "counter" else ""): family.type
        for family in registry.collect()
    }


def exposed_types(registry: CollectorRegistry) -> dict[str, str]:
    """:func:`all_types` of faultfleet's own metrics (``faultfleet_*``) only."""
    return {
        name: kind for name, kind in all_types(registry).items() if name.startswith(NAME_PREFIX)
    }


def samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """(sample name, sorted labels) -> value of every sample a scrape returns."""
    text = generate_latest(registry).decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    """The value of one sample; KeyError when the scrape lacks it."""
    return samples(registry)[(name, tuple(sorted(labels.items())))]


def naming_problems(types: dict[str, str]) -> list[str]:
    """Names that break ``faultfleet_<noun>_<unit>[_total]`` in base units."""
    problems = []
    for name, kind in types.items():
        if not NAME.fullmatch(name):
            problems.append(f"{name}: not faultfleet_<snake_case>")
        if (kind == "counter") != name.endswith("_total"):
            problems.append(f"{name}: only counters end in _total")
        if NOT_BASE_UNITS.search(name):
            problems.append(f"{name}: not in base units")
        if kind == "histogram" and not name.endswith(BASE_UNITS):
            problems.append(f"{name}: a histogram's name ends in its unit")
    return problems
