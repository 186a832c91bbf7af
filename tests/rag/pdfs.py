"""Hand-built PDFs for the loader tests: real PDF syntax (objects, content streams, an xref table)."""

from __future__ import annotations


def build_pdf(pages: list[str]) -> bytes:
    """A PDF whose pages draw the given content streams (PDF text operators) in Helvetica as /F1 and
    Helvetica-Bold as /F2."""
    count = len(pages)
    font = 3 + 2 * count
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b" ".join(b"%d 0 R" % (3 + 2 * i) for i in range(count)), count),
    ]
    for i, stream in enumerate(pages):
        data = stream.encode("latin-1")
        objects.append(b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R "
                       b"/Resources << /Font << /F1 %d 0 R /F2 %d 0 R >> >> >>" % (4 + 2 * i, font, font + 1))
        objects.append(b"<< /Length %d >>\nstream\n" % len(data) + data + b"\nendstream")
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica-Bold >>")
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def tiny_pdf(text: str) -> bytes:
    """A one-page PDF with `text` in 12-point Helvetica."""
    return build_pdf([f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET"])


def text_at(text: str, *, size: float, y: float, scaled: bool = False, bold: bool = False) -> str:
    """Draw one line at height `y`: set in `size` points, or (`scaled`) in 1 point scaled by the text
    matrix, as many producers write it; in Helvetica-Bold when `bold`."""
    font = "/F2" if bold else "/F1"
    if scaled:
        return f"BT {font} 1 Tf {size} 0 0 {size} 72 {y} Tm ({text}) Tj ET"
    return f"BT {font} {size} Tf 72 {y} Td ({text}) Tj ET"
