"""Discord's interaction signatures: Ed25519 over timestamp + body, and a timestamp that is recent."""

from __future__ import annotations

import time

from nacl.exceptions import BadSignatureError
from nacl.signing import VerifyKey

from channels.base import RawRequest
from gateway.errors import SignatureInvalid

SIGNATURE_MAX_AGE = 300  # seconds; Discord does not replay, so an old timestamp means a captured request


def verify_key(public_key: str | None) -> VerifyKey | None:
    """The application's public key (hex), or None when it is not configured."""
    return VerifyKey(bytes.fromhex(public_key)) if public_key else None


def verify_signature(key: VerifyKey | None, request: RawRequest) -> None:
    """Check the Ed25519 signature over timestamp + body, and refuse stale timestamps."""
    if key is None:
        raise SignatureInvalid("discord.public_key is not configured: interactions are disabled")
    signature = request.header("x-signature-ed25519")
    timestamp = request.header("x-signature-timestamp")
    if not signature or not timestamp:
        raise SignatureInvalid("missing X-Signature-Ed25519 or X-Signature-Timestamp")
    try:
        key.verify(timestamp.encode() + request.body, bytes.fromhex(signature))
    except (BadSignatureError, ValueError) as exc:
        raise SignatureInvalid("bad Ed25519 signature") from exc
    try:
        age = abs(time.time() - int(timestamp))
    except (ValueError, OverflowError) as exc:  # OverflowError: digits past what a float holds
        raise SignatureInvalid("malformed X-Signature-Timestamp") from exc
    if age > SIGNATURE_MAX_AGE:
        raise SignatureInvalid(f"stale X-Signature-Timestamp ({int(age)} s old)")
