"""Operator bearer tokens: kept only as sha256 digests, compared in constant time."""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

from gateway.settings import Settings


@dataclass(frozen=True, slots=True)
class Operator:
    """An authenticated operator and the bots they may serve (`None` means every bot); which of those are served
    now is `Escalations.servable`'s to say (of the bots configured)."""

    name: str
    bots: frozenset[str] | None


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


class OperatorAuth:
    """Resolves `Authorization: Bearer <token>` to an `Operator`; tokens come from the environment."""

    def __init__(self, settings: Settings) -> None:
        # Only digests are kept, so a memory dump or a debug print never shows a usable token.
        self._entries: list[tuple[bytes, Operator]] = []
        self.disabled: list[str] = []  # operators without a token, who cannot sign in (the server says so)
        for op in settings.operators:
            if not op.token:  # an unset ${ENV} must never become "the empty token works"
                self.disabled.append(op.name)
                continue
            bots = None if "*" in op.bots else frozenset(op.bots)
            self._entries.append((_digest(op.token), Operator(name=op.name, bots=bots)))  # read stripped

    def authenticate(self, authorization: str | None) -> Operator | None:
        """The operator for this header, or None. Every entry is compared, so timing leaks nothing."""
        if not authorization:
            return None
        scheme, _, token = authorization.strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        supplied = _digest(token.strip())
        found = None
        for digest, operator in self._entries:
            if hmac.compare_digest(digest, supplied):
                found = operator
        return found
