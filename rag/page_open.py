"""Opening a page of a directory source once, so that what is read is what was checked."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO

from rag.directory_walk import within


class LeadsOutside(Exception):
    """A page found, as it is opened, to lead out of the source's folder (a symlink, or in a linked folder)."""


def open_page(file: Path, inside: str | None) -> BinaryIO:
    """`file` opened once for reading, refused (`LeadsOutside`) unless what was opened is within the folder
    `inside` (a real path; None: a source that follows symlinks out of its folder).

    Why once: a page checked for a symlink out of the folder and then read again by its path could be
    swapped for one in between (by whoever can write to the folder), and the bot served the server's env
    file. Its resolved path is opened with O_NOFOLLOW, so a last part swapped for a symlink since is
    refused; then the path the opened file really has is checked (a folder on the way swapped for a link).
    A FIFO swapped in does not block the open (O_NONBLOCK) and is not read."""
    if inside is None:
        return open(file, "rb")
    real = os.path.realpath(file)
    if not within(real, inside):
        raise LeadsOutside(real)
    try:
        flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(real, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # its resolved path's last part is a symlink now: swapped since
            raise LeadsOutside(real) from None
        raise
    try:
        opened = _path_of(fd)
        if opened is not None and not within(opened, inside):
            raise LeadsOutside(opened)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise IsADirectoryError(errno.EISDIR, "not a regular file", str(file))
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _path_of(fd: int) -> str | None:
    """The path an open file has (Linux's /proc, macOS's F_GETPATH); None where neither is found."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        pass
    try:
        import fcntl
        return fcntl.fcntl(fd, fcntl.F_GETPATH, bytes(1024)).rstrip(b"\0").decode()
    except (ImportError, AttributeError, OSError):
        return None
