"""Run time of one call, from sampled calls kept in log-spaced buckets.

A sampled call's time goes into a bucket (8 per doubling, so a bucket's centre is
within 4.5% of any time in it), per signature. Buckets add up across flushes, runs
and processes, so the store can merge them with plain sums.

Each sample carries a *weight*: the calls since the function's previous timed call,
which it stands for. A signature's run time is the run time of its median call (the
lower median of its samples weighted by those calls): one call slowed by the
scheduler cannot move it. A function's run time per call is the mean of its
signatures' medians weighted the same way, so a shape called 10,000 times counts for
more than one called once, and each shape is valued at its own run time.

    counts = {}
    add_sample(counts, 0.0042, weight=100)
    median_seconds(counts)           # ~0.0042
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

BUCKETS_PER_OCTAVE = 8
FLOOR_SECONDS = 1e-7  # bucket 0 holds everything faster than this

# One signature's samples: bucket -> [samples, weight].
Buckets = dict[int, list[int]]


def bucket_of(seconds: float) -> int:
    if not seconds > FLOOR_SECONDS:
        return 0
    return int(math.log2(seconds / FLOOR_SECONDS) * BUCKETS_PER_OCTAVE)


def bucket_seconds(bucket: int) -> float:
    """The geometric centre of a bucket."""
    return FLOOR_SECONDS * 2.0 ** ((bucket + 0.5) / BUCKETS_PER_OCTAVE)


def add_sample(buckets: Buckets, seconds: float, weight: int = 1) -> None:
    found = buckets.setdefault(bucket_of(seconds), [0, 0])
    found[0] += 1
    found[1] += weight


def add_weight(buckets: Buckets, seconds: float, weight: int) -> None:
    """Calls that ran untimed, counted at the run time of the timed call they followed."""
    found = buckets.setdefault(bucket_of(seconds), [0, 0])
    found[1] += weight


def merge(into: Buckets, other: Mapping[int, Iterable[int]]) -> None:
    for bucket, (samples, weight) in other.items():
        found = into.setdefault(int(bucket), [0, 0])
        found[0] += int(samples)
        found[1] += int(weight)


def median_seconds(buckets: Mapping[int, Iterable[int]]) -> float | None:
    """The run time of the median call: the lower median of the samples, each weighted by
    the calls it stands for. None without samples.

    Weighting by calls keeps an interval in which the machine stalled (few calls, each
    slow) from counting as much as one in which the loop ran freely.
    """
    if len(buckets) == 1:  # most signatures over a short span: that bucket, if it has a sample
        ((bucket, (samples, _)),) = buckets.items()
        return bucket_seconds(int(bucket)) if int(samples) > 0 else None
    ordered = sorted((int(b), *map(int, v)) for b, v in buckets.items())
    if sum(n for _, n, _ in ordered) <= 0:
        return None
    weights = [w if w > 0 else n for _, n, w in ordered]  # a sample stands for at least itself
    half = sum(weights) / 2
    seen = 0
    for (bucket, _, _), weight in zip(ordered, weights, strict=False):
        seen += weight
        if seen >= half:
            return bucket_seconds(bucket)
    return bucket_seconds(ordered[-1][0])  # pragma: no cover - the loop returns


def per_call_seconds(signatures: Mapping[str, Mapping[int, Iterable[int]]]) -> float | None:
    """Run time of one call of a function: its signatures' medians, weighted by the calls
    their samples stand for. None when no call was timed."""
    total_weight = 0
    weighted = 0.0
    medians = []
    for buckets in signatures.values():
        median = median_seconds(buckets)
        if median is None:
            continue
        weight = sum(int(w) for _, w in buckets.values())
        medians.append(median)
        total_weight += weight
        weighted += weight * median
    if not medians:
        return None
    if total_weight <= 0:
        return sum(medians) / len(medians)
    return weighted / total_weight


def to_json(buckets: Buckets) -> dict[str, list[int]]:
    """JSON object keys are strings."""
    return {str(b): [int(v[0]), int(v[1])] for b, v in buckets.items()}


def from_json(data: Mapping[str, Iterable[int]] | None) -> Buckets:
    out: Buckets = {}
    if data:
        merge(out, {int(b): v for b, v in data.items()})
    return out
