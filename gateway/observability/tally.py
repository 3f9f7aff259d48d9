"""Labelled counters and histograms for what runs on every request, kept as plain numbers.

prometheus_client's own metrics take a lock and build a few objects on every increment and
observation; on the relay's path the four series touched per call cost 5 % of a call's
instructions (callgrind, docs/performance.md). These are only ever touched from the event
loop, so they keep plain numbers and become Prometheus metric families when /metrics is read,
with the same names, labels, buckets and `_created` samples the library's would have.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from bisect import bisect_left
from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

Labels = tuple[str, ...]


class _Tally(ABC):
    """A named metric with label names; its series are keyed by their label values."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str]) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = list(labelnames)

    def _labels(self, values: Labels) -> dict[str, str]:
        return dict(zip(self.labelnames, values, strict=True))

    @abstractmethod
    def collect(self) -> Metric:
        """The Prometheus family, with a sample per series."""


class TallyCounter(_Tally):
    """A counter by label values (`inc(*values)`); exposed as `<name>_total`."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str]) -> None:
        super().__init__(name, documentation, labelnames)
        self._values: dict[Labels, float] = {}
        self._created: dict[Labels, float] = {}

    def inc(self, *values: str) -> None:
        found = self._values.get(values)
        if found is None:
            self._created[values] = time.time()
            found = 0.0
        self._values[values] = found + 1

    def touch(self, *values: str) -> None:
        """The series exists, at zero if it is new: dashboards show zeros rather than gaps."""
        if values not in self._values:
            self._values[values] = 0.0
            self._created[values] = time.time()

    def collect(self) -> Metric:
        family = Metric(self.name, self.documentation, "counter")
        for values, count in self._values.items():
            labels = self._labels(values)
            family.add_sample(f"{self.name}_total", labels, count)
            family.add_sample(f"{self.name}_created", labels, self._created[values])
        return family


class TallyGauge(_Tally):
    """A gauge by label values: `inc`, `dec` and `set(value, *values)`."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str]) -> None:
        super().__init__(name, documentation, labelnames)
        self._values: dict[Labels, float] = {}

    def inc(self, *values: str) -> None:
        self._values[values] = self._values.get(values, 0.0) + 1

    def dec(self, *values: str) -> None:
        self._values[values] = self._values.get(values, 0.0) - 1

    def set(self, value: float, *values: str) -> None:
        self._values[values] = float(value)

    def collect(self) -> Metric:
        family = Metric(self.name, self.documentation, "gauge")
        for values, value in self._values.items():
            family.add_sample(self.name, self._labels(values), value)
        return family


class _Series:
    __slots__ = ("buckets", "total", "created")

    def __init__(self, size: int) -> None:
        self.buckets = [0] * size
        self.total = 0.0
        self.created = time.time()


class TallyHistogram(_Tally):
    """A histogram by label values (`observe(value, *values)`), buckets as `le` bounds."""

    def __init__(
        self, name: str, documentation: str, labelnames: Sequence[str], buckets: Sequence[float]
    ) -> None:
        super().__init__(name, documentation, labelnames)
        self._bounds = tuple(float(b) for b in buckets)
        self._les = [floatToGoString(b) for b in (*self._bounds, float("inf"))]  # type: ignore[no-untyped-call]
        self._series: dict[Labels, _Series] = {}

    def observe(self, value: float, *values: str) -> None:
        series = self._series.get(values)
        if series is None:
            series = self._series[values] = _Series(len(self._les))
        # `le` buckets: a value equal to a bound counts in that bound's bucket.
        series.buckets[bisect_left(self._bounds, value)] += 1
        series.total += value

    def collect(self) -> Metric:
        family = Metric(self.name, self.documentation, "histogram")
        for values, series in self._series.items():
            labels = self._labels(values)
            cumulative = 0
            for le, count in zip(self._les, series.buckets, strict=True):
                cumulative += count
                family.add_sample(f"{self.name}_bucket", {**labels, "le": le}, cumulative)
            family.add_sample(f"{self.name}_count", labels, cumulative)
            family.add_sample(f"{self.name}_sum", labels, series.total)
            family.add_sample(f"{self.name}_created", labels, series.created)
        return family


class Tallies(Collector):
    """Tallies collected together; `register` them once all are made, so that the registry
    knows their names (and refuses a second metric of the same name)."""

    def __init__(self) -> None:
        self._members: list[_Tally] = []

    def register(self, registry: CollectorRegistry) -> None:
        registry.register(self)

    def counter(self, name: str, documentation: str, labelnames: Sequence[str]) -> TallyCounter:
        made = TallyCounter(name, documentation, labelnames)
        self._members.append(made)
        return made

    def gauge(self, name: str, documentation: str, labelnames: Sequence[str]) -> TallyGauge:
        made = TallyGauge(name, documentation, labelnames)
        self._members.append(made)
        return made

    def histogram(
        self, name: str, documentation: str, labelnames: Sequence[str], buckets: Sequence[float]
    ) -> TallyHistogram:
        made = TallyHistogram(name, documentation, labelnames, buckets)
        self._members.append(made)
        return made

    def collect(self) -> Iterator[Metric]:
        for member in self._members:
            yield member.collect()

    def describe(self) -> Iterator[Metric]:
        return self.collect()
