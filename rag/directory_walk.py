"""Walking a directory source: which files it holds, which symlinks lead out of it, and how the files no
reader takes are counted."""

from __future__ import annotations

import errno
import os
from pathlib import Path


def describe_skipped(skipped: dict[str, int]) -> str:
    """`.docx (2), .json (1)`: the file types a directory held but no reader takes, most first."""
    ordered = sorted(skipped.items(), key=lambda item: (-item[1], item[0]))
    named = ", ".join(f"{suffix or '(no suffix)'} ({count})" for suffix, count in ordered[:SKIPPED_TYPES_NAMED])
    rest = sum(count for _, count in ordered[SKIPPED_TYPES_NAMED:])
    return f"{named} and {rest} more" if rest else named


SKIPPED_TYPES_NAMED = 5  # a source tree of code and images would otherwise fill the screen
DOCUMENT_TYPES_NOT_READ = frozenset({".doc", ".docx", ".odt", ".rtf", ".pages", ".ppt", ".pptx", ".odp", ".key",
                                     ".xls", ".xlsx", ".ods", ".csv", ".epub", ".rst", ".adoc", ".asciidoc", ".org",
                                     ".tex", ".mdx", ".xhtml", ".mht", ".mhtml"})
"""Suffixes of files written to be read, which a directory source does not take: said as a warning."""


def files_under(root: Path, *, follow_outside: bool = False) -> tuple[list[Path], list[Path], list[OSError]]:
    """Every file under `root`, sorted, following symlinked folders too (`rglob` skips them, while it
    follows symlinked files), each real folder once, so a link back up cannot loop. A link to a folder
    inside `root` is skipped: that folder is read under its own name, not under whichever name the walk
    met first (citations showed the alias, and removing the link re-embedded the folder). A link to a
    folder outside `root` is followed only with `follow_outside`; else it is returned second, unread.
    Third come the errors of the folders that could not be listed (no permission), each naming its folder:
    `os.walk` passed over them in silence, and their pages' chunks were deleted as gone. A folder deleted
    while it is walked is simply gone. A hidden folder (`.git/`, `.obsidian/`: `is_hidden`) is not entered
    at all: a `.git/` of thousands of object folders was walked to its end, then all of it left out."""
    inside = os.path.realpath(root)
    seen: set[str] = set()
    files: list[Path] = []
    outside: list[Path] = []
    unreadable: list[OSError] = []

    def not_listed(exc: OSError) -> None:
        if not isinstance(exc, FileNotFoundError):
            unreadable.append(exc)

    for folder, dirs, names in os.walk(root, followlinks=True, onerror=not_listed):
        real = os.path.realpath(folder)
        if real in seen:
            dirs[:] = []
            continue
        seen.add(real)
        kept = []
        for name in dirs:
            if name.startswith("."):
                continue
            link = os.path.join(folder, name)
            if not os.path.islink(link) or (away := not within(os.path.realpath(link), inside)) and follow_outside:
                kept.append(name)
            elif away:
                outside.append(Path(link))
        dirs[:] = kept
        files.extend(Path(folder) / name for name in names)
    return sorted(files), sorted(outside), unreadable


def within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def is_hidden(relative_path: str) -> bool:
    return any(part.startswith(".") for part in relative_path.split("/"))


def broken_link(link: Path) -> str:
    """Why a symlink to a page cannot be read: its target is gone, or it leads back to itself (a loop
    was said to be a target that "does not exist", though it is right there in the folder)."""
    try:
        os.stat(link)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return f"symlink loop: it leads back to itself (through {os.readlink(link)}); point it at the page"
    return f"broken symlink: its target {os.readlink(link)} does not exist"
