"""How long splitting one long answer takes (`python -m bench.splitter`): every channel's send splits the
reply on the event loop, so this is what every other request of the process waits meanwhile.

Answers: ordinary prose with links, emphasis, a code block and a list item's indented fence, repeated
to the size given; and text a model may echo back (a run of "[", of "[a](", of "*_"), which made the
Markdown parser's inline pass slow. Prints the best of `--runs` for `split_text` at Discord's 2000.
"""

from __future__ import annotations

import argparse
import time

from channels.render import split_text

_PROSE = ("Some **bold** text with a [link](https://example.com/a_b) and `code`. " * 8 + "\n\n"
          + "```python\n" + "x = 1  # comment\n" * 40 + "```\n\n"
          + "1. Install:\n\n    ```bash\n    pip install x\n    ```\n\n")


def answers(size: int) -> dict[str, str]:
    return {"prose": (_PROSE * (size // len(_PROSE) + 1))[:size], "brackets": "[" * size,
            "links": ("[a](" * size)[:size], "emphasis": ("*_" * size)[:size]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[13_000, 130_000])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    for size in args.sizes:
        for name, text in answers(size).items():
            best = min(_timed(text) for _ in range(args.runs))
            print(f"{name:9} {size:>8} chars  {best * 1000:8.1f} ms")


def _timed(text: str) -> float:
    started = time.perf_counter()
    split_text(text, limit=2000)
    return time.perf_counter() - started


if __name__ == "__main__":
    main()
