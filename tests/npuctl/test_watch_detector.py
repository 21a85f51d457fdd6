"""The watch detector on synthetic metric streams: spikes and a sustained fault are found,
normal samples are not flagged, and the fault stays an anomaly while it lasts (where the
rolling "last 20" score forgets it)."""

from __future__ import annotations

import numpy as np
import pytest

from npuctl.watch.detector import Detector, Settings
from testkit.metric_streams import precision_recall, rolling_scores, stream


def run(detector: Detector, vectors: np.ndarray) -> tuple[np.ndarray, list]:
    verdicts = [detector.observe(vector) for vector in vectors]
    return np.array([verdict.anomaly for verdict in verdicts]), verdicts


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_spikes_and_a_sustained_fault_are_found(seed: int) -> None:
    data = stream(seed=seed)
    flags, verdicts = run(Detector(Settings(warmup=data.warmup)), data.vectors)
    assert all(v.reason == "warming up" for v in verdicts[: data.warmup])
    labels = data.labels
    assert all(flags[index] for index in data.spikes)
    fault = flags[data.fault.start : data.fault.stop]
    assert fault.mean() >= 0.95
    assert fault[-50:].all(), "the fault became normal before it ended"
    normal = ~labels
    normal[: data.warmup] = False
    assert flags[normal].mean() <= 0.04  # mostly the samples just after the fault ends
    precision, recall = precision_recall(flags[data.warmup :], labels[data.warmup :])
    assert precision >= 0.9 and recall >= 0.95


def test_the_rolling_window_forgets_a_sustained_fault() -> None:
    data = stream()
    scores = rolling_scores(data.vectors)
    threshold = np.quantile(scores[20 : data.warmup], 0.99) * 1.1
    flags = scores > threshold
    fault = flags[data.fault.start : data.fault.stop]
    assert fault[-100:].mean() < 0.1  # what this detector exists to fix
    ours, _ = run(Detector(Settings(warmup=data.warmup)), data.vectors)
    assert ours[data.fault.start : data.fault.stop][-100:].all()


def test_rebaseline_accepts_a_new_normal() -> None:
    data = stream()
    detector = Detector(Settings(warmup=data.warmup))
    run(detector, data.vectors[: data.fault.start + 10])
    assert detector.observe(data.vectors[data.fault.start + 11]).anomaly
    detector.rebaseline()
    run(detector, data.vectors[data.fault.start + 12 : data.fault.start + 12 + data.warmup])
    later = [
        detector.observe(v).anomaly for v in data.vectors[data.fault.start + 140 : data.fault.stop]
    ]
    assert np.mean(later) <= 0.05


def test_a_long_warm_up_is_kept_in_a_bounded_reservoir() -> None:
    data = stream(samples=3000, warmup=2000)
    detector = Detector(Settings(warmup=2000, reservoir=256))
    run(detector, data.vectors[:2000])
    assert not detector.warming_up
    assert detector._baseline is not None and len(detector._baseline) == 256


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="warm-up"):
        Detector(Settings(warmup=3, k=3))
