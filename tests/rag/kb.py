"""A small knowledge base shared by the search and ingest tests."""

from __future__ import annotations

from pathlib import Path

ERROR_CODES = ["QX-7731", "LM-2048", "ZT-5510", "PR-3306", "KD-9184", "WB-6627", "NF-1402", "HC-8895"]
TARGET_CODE = "QX-7731"
FIXES = [
    "re-link the storage bucket", "rotate the API key", "clear the local cache", "update the desktop app",
    "check the firewall rules", "renew the certificate", "free some disk space", "sign in again",
]

FILES = {
    "billing.md": """# Billing

## Plans

The Starter plan costs 9 dollars a month and includes three seats. The Business Plus plan costs
49 dollars a month and includes unlimited seats and priority support.

## Refunds

Refunds are processed within five business days. Card payments are refunded to the same card.
""",
    "error-codes.md": """# Understanding error codes

Every error message shows a code made of two letters, a dash and four digits, such as AB-1234.
The letters name the component and the digits the exact failure. Quote the full code when you
contact support, so the team can look it up.
""",
    "account.txt": "Passwords\n\nTo reset your password, open Settings, choose Security and press Reset password.\n\n"
    "Two-factor authentication can be enabled in the same Security screen.",
}


for _code, _fix in zip(ERROR_CODES, FIXES):
    # Near-identical pages: only the literal code tells them apart, which is BM25's job.
    FILES[f"sync/{_code.lower()}.md"] = (
        "# Sync stopped\n\n"
        "The desktop app keeps your files in step with the cloud. Sometimes the sync stops, the tray icon "
        "turns red and a banner asks you to act. Wait a minute first: most interruptions fix themselves "
        f"when the connection returns. If the banner stays, note the code it shows ({_code}), then {_fix}. "
        "After that, press Retry in the banner and keep the app open until the icon turns green again.\n"
    )


def write_kb(folder: Path) -> Path:
    """Write the sample files into `folder` and return it."""
    for name, text in FILES.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return folder
