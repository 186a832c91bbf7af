"""The run of each source this process holds: whom another run of the source waits for, whom a
scheduled run that could not start was behind, and how far it has come (/readyz)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from gateway.models import utcnow

RUN_KINDS = {"schedule": "scheduled", "startup": "start-up", "cli": "`gateway ingest`"}


@dataclass
class SourceRun:
    """A run that holds its source's turn in this process (it may still wait for a slot, or for another
    process's run of the source on PostgreSQL)."""

    trigger: str
    since: datetime = field(default_factory=utcnow)
    slot: bool = False  # it holds one of the process's `MAX_SOURCE_RUNS` slots; until then it waits for one
    pages: tuple[int, int] | None = None  # (fetched, listed) of a urls or sitemap source, as it fetches them
    documents: tuple[float, int] | None = None  # (stored, loaded), once it stores them

    @property
    def kind(self) -> str:
        """How the run is named to a person: "scheduled", "start-up", "`gateway ingest`"."""
        return RUN_KINDS.get(self.trigger, self.trigger)

    @property
    def since_hms(self) -> str:
        return self.since.strftime("%H:%M:%S")

    def progress(self) -> dict[str, float]:
        """How far it is, as far as it has said: pages fetched, then documents stored."""
        out: dict[str, float] = {}
        if self.pages is not None:
            out["pages_fetched"], out["pages"] = self.pages
        if self.documents is not None:
            out["documents_done"], out["documents"] = self.documents
        return out
