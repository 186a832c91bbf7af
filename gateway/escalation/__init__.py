"""Escalation to a human operator: the handoff state machine, who holds a thread, its audit trail, and
hand-back."""
