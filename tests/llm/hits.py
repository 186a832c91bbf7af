"""A minimal Hit for tests (the rag layer's own class satisfies the same Protocol)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FakeHit:
    """A retrieved chunk."""

    text: str
    source: str
    title: str
    heading_path: tuple[str, ...] = ()
    url: str | None = None
    chunk_id: str = ""


REFUNDS = FakeHit(
    text="## Refunds\nYou can ask for a refund within 30 days of purchase. "
    "Refunds reach your card in 5 business days.\n- Annual plans are refunded pro rata.",
    source="billing/refunds.md",
    title="Refunds",
    heading_path=("Billing", "Refunds"),
    url="https://help.example.com/billing/refunds",
    chunk_id="refunds-0",
)
PASSWORD = FakeHit(
    text="To reset your password, open Settings and choose **Security**. Then click *Reset password* "
    "and follow the link we email you.",
    source="account/password.md",
    title="Passwords",
    heading_path=("Account", "Password"),
    url=None,
    chunk_id="password-0",
)
PLANS = FakeHit(
    text="The Starter plan costs 9 dollars a month. The Team plan costs 29 dollars a month per seat.",
    source="plans.md",
    title="Plans and pricing",
    heading_path=("Plans",),
    url="javascript:alert(1)",
    chunk_id="plans-0",
)
