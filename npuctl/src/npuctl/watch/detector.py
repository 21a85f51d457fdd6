"""Anomaly scores that a persistent fault cannot wash out.

"Cosine against the last 20 vectors" forgets: a fault that lasts 20 samples becomes the
new normal. Here the baseline is frozen after a warm-up:

- **score**: the cosine distance from a vector to its k-th nearest neighbour in the warm-up
  reservoir (a uniform sample of the warm-up vectors, so a long warm-up stays bounded);
- **spike threshold**: the ``quantile`` of the same score over the warm-up vectors, each
  scored against the others (leave-one-out), times ``margin``: a stated false-alarm rate
  on data like the warm-up, learned, not guessed;
- **EWMA** of the score (capped at the spike threshold) with the control limit of an EWMA
  chart (mean + L sigma sqrt(alpha / (2 - alpha)) of the warm-up scores): a sustained shift
  too small for the spike threshold still crosses it, and stays over it while the fault
  lasts.

A sample is anomalous when its score is over the spike threshold or the EWMA is over its
limit. ``rebaseline()`` starts a new warm-up (after a deliberate change of the machine).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

from ..embeddings import normalise


@dataclass(frozen=True)
class Verdict:
    score: float  # cosine distance to the k-th nearest warm-up vector
    ewma: float
    threshold: float  # spike threshold (nan while warming up)
    ewma_limit: float
    anomaly: bool
    reason: str  # "" | "spike" | "sustained" | "warming up"


@dataclass(frozen=True)
class Settings:
    warmup: int = 120  # samples before scoring (an hour at one per 30 s)
    k: int = 3
    quantile: float = 0.99
    margin: float = 1.3
    alpha: float = 0.2  # EWMA weight of the newest score
    sigmas: float = 4.0  # EWMA control limit, in standard deviations
    reservoir: int = 1024  # warm-up vectors kept at most
    # Scores below this are rounding (float32 cosine of equal texts), never an anomaly: a
    # warm-up of identical samples would otherwise learn a threshold of 0.
    floor: float = 1e-4


class Detector:
    def __init__(self, settings: Settings = Settings(), seed: int = 0) -> None:
        if settings.warmup <= settings.k:
            raise ValueError("the warm-up must hold more samples than k")
        self.settings = settings
        self._random = random.Random(seed)
        self.rebaseline()

    def rebaseline(self) -> None:
        self._warm: list[np.ndarray] = []
        self._seen = 0
        self._baseline: np.ndarray | None = None
        self.threshold = float("nan")
        self.ewma_limit = float("nan")
        self._ewma = 0.0

    @property
    def warming_up(self) -> bool:
        return self._baseline is None

    def observe(self, vector: np.ndarray) -> Verdict:
        unit = normalise(vector)
        if self._baseline is None:
            self._collect(unit)
            return Verdict(0.0, 0.0, self.threshold, self.ewma_limit, False, "warming up")
        score = self._score(unit)
        alpha = self.settings.alpha
        # A spike is flagged on its own; capped here, it cannot hold the EWMA up afterwards.
        self._ewma = alpha * min(score, self.threshold) + (1 - alpha) * self._ewma
        reason = (
            "spike"
            if score > self.threshold
            else "sustained"
            if self._ewma > self.ewma_limit
            else ""
        )
        return Verdict(score, self._ewma, self.threshold, self.ewma_limit, bool(reason), reason)

    def _collect(self, unit: np.ndarray) -> None:
        self._seen += 1
        capacity = self.settings.reservoir
        if len(self._warm) < capacity:
            self._warm.append(unit)
        else:  # reservoir sampling: every warm-up vector is kept with equal chance
            slot = self._random.randrange(self._seen)
            if slot < capacity:
                self._warm[slot] = unit
        if self._seen >= self.settings.warmup:
            self._freeze()

    def _freeze(self) -> None:
        baseline = np.stack(self._warm)
        distances = 1.0 - baseline @ baseline.T
        np.fill_diagonal(distances, np.inf)  # leave one out
        k = self.settings.k
        scores = np.partition(distances, k - 1, axis=1)[:, k - 1]
        self._baseline = baseline
        settings = self.settings
        quantile = float(np.quantile(scores, settings.quantile))
        self.threshold = max(quantile * settings.margin, settings.floor)
        mean, sigma = float(scores.mean()), float(scores.std())
        spread = settings.sigmas * sigma * float(np.sqrt(settings.alpha / (2 - settings.alpha)))
        self.ewma_limit = max(mean + spread, settings.floor)
        self._ewma = mean

    # -- persistence: a restarted agent keeps its baseline -------------------------------
    def state(self) -> dict[str, np.ndarray]:
        if self._baseline is None:
            return {"warm": np.stack(self._warm) if self._warm else np.zeros((0, 0))}
        return {
            "baseline": self._baseline,
            "numbers": np.array([self.threshold, self.ewma_limit, self._ewma]),
        }

    def restore(self, state: dict[str, np.ndarray]) -> None:
        self.rebaseline()
        if "baseline" in state:
            self._baseline = state["baseline"].astype(np.float32)
            self.threshold, self.ewma_limit, self._ewma = (float(x) for x in state["numbers"])
        else:
            self._warm = list(state["warm"].astype(np.float32))
            self._seen = len(self._warm)

    @property
    def collected(self) -> int:
        return self._seen

    def _score(self, unit: np.ndarray) -> float:
        assert self._baseline is not None
        distances = 1.0 - self._baseline @ unit
        k = self.settings.k
        return float(np.partition(distances, k - 1)[k - 1])
