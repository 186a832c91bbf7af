"""How far an ingest run is, in documents, for a progress bar (`gateway ingest`, the admin stream)."""

from __future__ import annotations

from collections.abc import Callable

Progress = Callable[[float, int], None]
"""(documents done, documents): a document is done once its chunks are embedded and stored, and
counts in part while they are being embedded."""


class DocumentProgress:
    """The run's progress in documents, reported as it moves."""

    def __init__(self, report: Progress | None, total: int) -> None:
        self.report, self.total, self.done = report, total, 0.0
        if report is not None and total:
            # Shown at once: the first embedding step (with the model's first load) takes many seconds,
            # during which a bar that had not appeared yet looked like a hung command.
            report(0.0, total)

    def advance(self, documents: float) -> None:
        self.done = min(float(self.total), self.done + documents)
        if self.report is not None:
            self.report(round(self.done, 3), self.total)
