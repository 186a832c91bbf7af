"""Getting a stored reply to the customer: the outbox and its retries, streaming by edits, the typing
indicator, the per-channel send breaker, and delivery receipts."""
