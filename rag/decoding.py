"""Bytes to text for knowledge files and fetched pages.

A byte order mark wins and is dropped (UTF-8, or UTF-16/32 as Windows Notepad saves "Unicode" text);
then UTF-8 when the bytes are valid UTF-8 (whatever a label says), then the declared charset (HTTP header,
`<meta charset>`, XML declaration), then a legacy charset. Binary content (NUL bytes, many control or
undecodable characters) raises `NotTextError` instead of being indexed as garbage. Line endings come out as
LF whatever the file was saved with (Windows' CRLF, old Mac's CR): a CRLF text file kept a CR in each line of
its chunks, and of its answers and citations; LF text is left as it is, so its chunks and their ids are too.
"""

from __future__ import annotations

import codecs
import re
import unicodedata

# Browsers read these labels as windows-1252 (WHATWG Encoding), and so do most files that carry them.
_AS_CP1252 = {"ascii", "iso8859-1"}
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.IGNORECASE)
_XML_ENCODING = re.compile(rb"""^\s*<\?xml[^>]*encoding\s*=\s*["']([A-Za-z0-9_.:-]+)""", re.IGNORECASE)
_JUNK = re.compile("[\x01-\x08\x0e-\x1f\x7f-\x9f\ufffd]")  # controls other than whitespace, and U+FFFD
MAX_JUNK_RATIO = 0.02
SNIFF_BYTES = 4096
# UTF-32 LE's mark begins with UTF-16 LE's, so it is looked for first.
_BOMS = (
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)


class NotTextError(ValueError):
    """The bytes are not text in any charset we can tell (a binary file, or UTF-16/32 without a BOM)."""


def decode_text(data: bytes, *, declared: str | None = None, markup: bool = False) -> str:
    """Text of `data`. `declared` is a charset from outside (Content-Type); `markup` also looks for
    `<meta charset>` and an XML declaration in the first bytes."""
    for bom, charset in _BOMS:  # a BOM overrides any declaration, as in browsers
        if data.startswith(bom):
            return _checked(data[len(bom):].decode(charset, errors="replace"))
    if b"\x00" in data:
        # ASCII text never holds NUL; UTF-16/32 text is full of them, and binary files nearly always.
        wide = _strict(data, declared) if _is_wide(declared) else None
        if wide is not None:
            return _checked(wide)
        raise NotTextError("not text: contains NUL bytes (a binary file, or UTF-16/32 text without a BOM: save it as UTF-8)")
    if _is_wide(declared):
        # Without a NUL byte the bytes are not UTF-16/32 (its spaces, line ends and markup are half NUL): a
        # server's charset=utf-16 over a page saved as UTF-8 read it two bytes a character, as CJK garbage.
        declared = None
    if not data.isascii() and (utf8 := _strict(data, "utf-8")) is not None:
        # Legacy text is next to never valid UTF-8 (its accented letters would have to come in UTF-8's
        # byte patterns), while a UTF-8 file under a stale label is common: a template's `<meta charset=
        # "iso-8859-1">`, a server's default `charset=ISO-8859-1`. Read by the label, "Café" was "CafÃ©".
        return _checked(utf8)
    candidates = [declared, _sniffed_charset(data) if markup else None, "utf-8"]
    for charset in candidates:
        text = _strict(data, charset)
        if text is not None:
            return _checked(text)
    return _checked(_legacy(data))


def _sniffed_charset(data: bytes) -> str | None:
    """The charset the markup declares. One naming UTF-16/32 is ignored (WHATWG reads it as UTF-8): the
    declaration was legible as ASCII, so the bytes are not that (a page re-saved as UTF-8 that kept Word's
    `<meta charset="utf-16">` was read two bytes a character, as a page of CJK garbage)."""
    head = data[:SNIFF_BYTES]
    found = _XML_ENCODING.search(head) or _META_CHARSET.search(head)
    label = found.group(1).decode("ascii") if found else None
    return None if _is_wide(label) else label


def _is_wide(label: str | None) -> bool:
    """Whether `label` names UTF-16 or UTF-32."""
    return bool(label) and label.lower().replace("-", "").replace("_", "").startswith(("utf16", "utf32"))


def _strict(data: bytes, charset: str | None) -> str | None:
    """`data` decoded in `charset`, or None if the label is unknown or the bytes do not fit it."""
    if not charset:
        return None
    try:
        name = codecs.lookup(charset).name
    except LookupError:
        return None
    if name in _AS_CP1252:
        name = "cp1252"
    try:
        return data.decode(name)
    except UnicodeDecodeError:
        return None


def _legacy(data: bytes) -> str:
    """Not UTF-8: a detected charset when it reads as a non-Latin script, else windows-1252.

    Detectors guess poorly between the Latin code pages on short text (they read French "crème" as
    cp1250 "crčme"), while windows-1252 is by far the most common legacy charset for Latin text.
    """
    guess = _detect(data)
    if guess is not None and not _is_latin(guess):
        return guess
    try:
        return data.decode("cp1252")
    except UnicodeDecodeError:  # bytes windows-1252 leaves undefined
        if guess is not None:
            return guess
    raise NotTextError("not text: undecodable as UTF-8 or any detected charset (a binary file?)")


def _detect(data: bytes) -> str | None:
    try:
        import charset_normalizer  # installed with trafilatura; no dependency of our own
    except ImportError:
        return None
    best = charset_normalizer.from_bytes(data).best()
    if best is None or best.encoding.startswith(("utf_16", "utf_32")):
        return None  # UTF-16/32 without NUL bytes is a misreading of short text
    return str(best)


def _is_latin(text: str) -> bool:
    letters = (c for c in text if ord(c) > 127 and c.isalpha())
    return all(unicodedata.name(c, "").startswith("LATIN") for c in letters)


def _checked(text: str) -> str:
    """`text` with LF line endings, unless too much of it is control characters or replacement marks: binary, not text."""
    junk = len(_JUNK.findall(text))
    if text and junk / len(text) > MAX_JUNK_RATIO:
        raise NotTextError(f"not text: {junk} of {len(text)} characters are control or undecodable bytes (a binary file?)")
    return text.replace("\r\n", "\n").replace("\r", "\n") if "\r" in text else text
