"""The agent's own storage: one SQLite file, no server. Every sample (text, metrics, vector,
score) is written here first; the detector's baseline too, so a restart neither loses data
nor warms up again. Old samples are deleted beyond ``keep``; samples not yet delivered to
Qdrant are kept (up to ten times ``keep``) so a server that is away loses nothing."""

from __future__ import annotations

import io
import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SCHEMA = """
CREATE TABLE IF NOT EXISTS samples (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    time REAL NOT NULL,
    host TEXT NOT NULL,
    text TEXT NOT NULL,
    metrics TEXT NOT NULL,
    vector BLOB NOT NULL,
    score REAL,
    ewma REAL,
    anomaly INTEGER NOT NULL,
    reason TEXT NOT NULL,
    delivered INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS baseline (key TEXT PRIMARY KEY, value BLOB NOT NULL);
"""


@dataclass
class Stored:
    id: int
    time: float
    host: str
    text: str
    metrics: dict
    vector: np.ndarray
    score: float | None
    anomaly: bool
    reason: str


class Store:
    def __init__(self, path: Path, keep: int) -> None:
        self.path = path
        self.keep = keep
        path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(path)
        self.db.executescript(SCHEMA)
        self.db.execute("PRAGMA journal_mode=WAL")

    def close(self) -> None:
        self.db.close()

    def add(
        self,
        host: str,
        time: float,
        text: str,
        metrics: dict,
        vector: np.ndarray,
        score: float | None,
        ewma: float | None,
        anomaly: bool,
        reason: str,
    ) -> int:
        with self.db:
            cursor = self.db.execute(
                "INSERT INTO samples (time, host, text, metrics, vector, score, ewma, anomaly, "
                "reason) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    time,
                    host,
                    text,
                    json.dumps(metrics),
                    np.asarray(vector, dtype="<f4").tobytes(),
                    score,
                    ewma,
                    int(anomaly),
                    reason,
                ),
            )
            self._retain()
        return int(cursor.lastrowid or 0)

    def _retain(self) -> None:
        self.db.execute(
            "DELETE FROM samples WHERE delivered = 1 AND id <= (SELECT MAX(id) FROM samples) - ?",
            (self.keep,),
        )
        self.db.execute(
            "DELETE FROM samples WHERE id <= (SELECT MAX(id) FROM samples) - ?", (10 * self.keep,)
        )

    def undelivered(self, limit: int = 256) -> list[Stored]:
        rows = self.db.execute(
            "SELECT id, time, host, text, metrics, vector, score, anomaly, reason FROM samples "
            "WHERE delivered = 0 ORDER BY id LIMIT ?",
            (limit,),
        ).fetchall()
        return [
            Stored(
                row[0],
                row[1],
                row[2],
                row[3],
                json.loads(row[4]),
                np.frombuffer(row[5], dtype="<f4"),
                row[6],
                bool(row[7]),
                row[8],
            )
            for row in rows
        ]

    def mark_delivered(self, ids: list[int]) -> None:
        with self.db:
            self.db.executemany(
                "UPDATE samples SET delivered = 1 WHERE id = ?", [(i,) for i in ids]
            )
            self._retain()

    def deliver_nowhere(self) -> None:
        """Without Qdrant every sample counts as delivered (retention applies to all)."""
        with self.db:
            self.db.execute("UPDATE samples SET delivered = 1 WHERE delivered = 0")
            self._retain()

    def count(self) -> int:
        return int(self.db.execute("SELECT COUNT(*) FROM samples").fetchone()[0])

    def save_baseline(self, state: dict[str, np.ndarray]) -> None:
        buffer = io.BytesIO()
        np.savez(buffer, **state)  # type: ignore[arg-type]  # numpy's stub reads 'allow_pickle'
        with self.db:
            self.db.execute(
                "INSERT OR REPLACE INTO baseline (key, value) VALUES ('detector', ?)",
                (buffer.getvalue(),),
            )

    def load_baseline(self) -> dict[str, np.ndarray] | None:
        row = self.db.execute("SELECT value FROM baseline WHERE key = 'detector'").fetchone()
        if row is None:
            return None
        with np.load(io.BytesIO(row[0]), allow_pickle=False) as data:
            return {key: data[key] for key in data.files}

    def forget_baseline(self) -> None:
        with self.db:
            self.db.execute("DELETE FROM baseline")
