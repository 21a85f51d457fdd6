"""Embeddings of any NPU family: L2 normalisation and cosine similarity."""

from __future__ import annotations

import math

import numpy as np


def normalise(vector: np.ndarray) -> np.ndarray:
    vector = np.asarray(vector, dtype=np.float32).reshape(-1)
    norm = math.sqrt(float(vector.dot(vector)))  # np.linalg.norm's sum, without its checks
    return vector / norm if norm > 0 else vector


def similarity(left: list[np.ndarray], right: list[np.ndarray]) -> np.ndarray:
    """Cosine similarity matrix of L2-normalised embeddings."""
    return np.stack(left) @ np.stack(right).T
