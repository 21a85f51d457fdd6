"""make bench, the watch detector: precision and recall on synthetic metric streams (eight
spikes and a 2.5-hour sustained fault each), beside the rolling "cosine against the last 20"
score of the community agent with a threshold learned the same way."""

from __future__ import annotations

import sys

import numpy as np

from bench.report import print_rows
from npuctl.watch.detector import Detector, Settings
from testkit.metric_streams import Stream, precision_recall, rolling_scores, stream

SEEDS = range(1, 21)


BENCH = "watch-quality"


def flags_ours(data: Stream) -> np.ndarray:
    detector = Detector(Settings(warmup=data.warmup))
    return np.array([detector.observe(vector).anomaly for vector in data.vectors])


def flags_rolling(data: Stream) -> np.ndarray:
    scores = rolling_scores(data.vectors)
    threshold = np.quantile(scores[20 : data.warmup], 0.99) * 1.3
    return scores > threshold


def main() -> int:
    totals = {"ours": [], "reference": []}
    sustained = {"ours": [], "reference": []}
    for seed in SEEDS:
        data = stream(seed=seed)
        labels = data.labels[data.warmup :]
        for name, flags in (("ours", flags_ours(data)), ("reference", flags_rolling(data))):
            totals[name].append(precision_recall(flags[data.warmup :], labels))
            sustained[name].append(flags[data.fault.start : data.fault.stop].mean())
    ours, reference = (np.array(totals[name]) for name in ("ours", "reference"))
    fault_ours, fault_reference = (float(np.mean(sustained[n])) for n in ("ours", "reference"))
    rows = [
        _row(
            "watch precision (20 streams, spikes + a sustained fault)",
            "fraction of flagged samples that are anomalies (mean)",
            float(ours[:, 0].mean()),
            float(reference[:, 0].mean()),
            0.9,
        ),
        _row(
            "watch recall (20 streams, spikes + a sustained fault)",
            "fraction of anomalous samples flagged (mean)",
            float(ours[:, 1].mean()),
            float(reference[:, 1].mean()),
            0.95,
        ),
        _row(
            "watch: samples of the sustained fault flagged",
            "fraction (mean); the rolling window learns the fault as normal",
            fault_ours,
            fault_reference,
            0.95,
        ),
    ]
    return 0 if print_rows(rows, BENCH) else 1


def _row(name: str, unit: str, ours: float, reference: float, minimum: float) -> dict:
    """A quality figure: its verdict is ours against the target; the reference is beside."""
    return {
        "name": name,
        "unit": unit,
        "ours": ours,
        "reference": reference,
        "ratio": ours / max(reference, 1e-9),
        "target": f">= {minimum}",
        "ok": ours >= minimum,
    }


if __name__ == "__main__":
    sys.exit(main())
