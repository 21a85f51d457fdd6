"""Synthetic system-metric streams with known anomalies, and a stand-in embedding, for the
watch detector's tests and its benchmark (precision and recall)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Stream:
    vectors: np.ndarray  # one embedding per sample
    spikes: set[int]  # single-sample anomalies
    fault: range  # a sustained fault
    warmup: int

    @property
    def labels(self) -> np.ndarray:
        labels = np.zeros(len(self.vectors), dtype=bool)
        labels[list(self.spikes)] = True
        labels[self.fault.start : self.fault.stop] = True
        return labels


def stream(samples: int = 1200, warmup: int = 120, seed: int = 1) -> Stream:
    """Metrics every 30 s: CPU, RAM, load, SoC temperature and disk with the rhythm of a job
    that runs every 30 minutes (the warm-up sees it twice) and noise; 8 spikes (CPU and
    temperature jump for one sample) and one sustained fault (the SoC runs 20 °C hotter with
    a busy CPU for 300 samples, 2.5 hours)."""
    rng = np.random.default_rng(seed)
    t = np.arange(samples)
    daily = np.sin(2 * np.pi * t / 60)
    cpu = np.clip(20 + 10 * daily + rng.normal(0, 4, samples), 0, 100)
    ram = np.clip(45 + 3 * daily + rng.normal(0, 1.5, samples), 0, 100)
    load = np.clip(0.8 + 0.4 * daily + rng.normal(0, 0.15, samples), 0, None)
    temp = 48 + 5 * daily + rng.normal(0, 1.2, samples)
    disk = 60 + t * 0.001 + rng.normal(0, 0.05, samples)
    spikes = set(rng.choice(np.arange(warmup + 20, warmup + 400), 8, replace=False).tolist())
    for index in spikes:
        cpu[index], temp[index], load[index] = 98, 88, 7.5
    fault = range(warmup + 500, warmup + 800)
    cpu[fault.start : fault.stop] += 30
    temp[fault.start : fault.stop] += 20
    load[fault.start : fault.stop] += 1.5
    features = np.stack([cpu / 100, ram / 100, load / 8, temp / 100, disk / 100], axis=1)
    return Stream(embed(features, seed), spikes, fault, warmup)


def embed(features: np.ndarray, seed: int) -> np.ndarray:
    """Texts of one template share most of their meaning: a common direction plus a small
    projection of the numbers, and noise (an encoder is not exact either)."""
    rng = np.random.default_rng(seed + 100)
    common = rng.normal(0, 1, 512)
    projection = rng.normal(0, 1, (features.shape[1], 512))
    noise = rng.normal(0, 0.02, (len(features), 512))
    return common + 4 * (features - features[:100].mean(axis=0)) @ projection + noise


def rolling_scores(vectors: np.ndarray, window: int = 20) -> np.ndarray:
    """The community agent's score: 1 - the best cosine against the last ``window`` vectors."""
    units = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    scores = np.zeros(len(units))
    for index in range(window, len(units)):
        scores[index] = 1 - float((units[index - window : index] @ units[index]).max())
    return scores


def precision_recall(flags: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
    true_positive = int((flags & labels).sum())
    precision = true_positive / max(int(flags.sum()), 1)
    recall = true_positive / max(int(labels.sum()), 1)
    return precision, recall
