"""The run of each source this process holds: whom another run of the source waits for, and whom a
scheduled run that could not start was behind."""

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

    @property
    def kind(self) -> str:
        """How the run is named to a person: "scheduled", "start-up", "`gateway ingest`"."""
        return RUN_KINDS.get(self.trigger, self.trigger)

    @property
    def since_hms(self) -> str:
        return self.since.strftime("%H:%M:%S")
