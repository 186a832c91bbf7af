"""`gateway chat` shows what arrives between turns: an operator's reply, a handoff notice; a turn's own
reply once, from `ask`."""

from __future__ import annotations

import time

import gateway.terminal_chat as terminal_chat


async def test_an_operator_reply_between_turns_is_shown_once(monkeypatch, capsys):
    transcript = [{"id": 1, "direction": "in", "author": "customer", "text": "talk to a human"},
                  {"id": 2, "direction": "out", "author": "bot", "text": "I've asked a person to take over."}]
    typed = iter(["talk to a human", None, ""])

    def read(prompt: str) -> str:
        line = next(typed)
        if line is None:  # the customer waits; meanwhile a person joins and replies
            transcript.extend([{"id": 3, "direction": "out", "author": "system", "text": "A person has joined."},
                               {"id": 4, "direction": "out", "author": "operator", "text": "Hi, Dana here."}])
            time.sleep(0.5)
            line = next(typed)
        return line

    async def ask(text: str) -> dict:
        return {"reply": transcript[1]["text"], "citations": [], "state": "waiting"}

    async def follow(after: int) -> list[dict]:
        return [m for m in transcript if m["id"] > after]

    monkeypatch.setattr(terminal_chat, "FOLLOW_EVERY_S", 0.05)
    assert await terminal_chat.converse("acme", ask, follow, read_line=read) == 0
    out = capsys.readouterr().out
    assert out.count("I've asked a person to take over.") == 1  # the turn's reply, not again by the follower
    assert "acme> A person has joined." in out and "a person> Hi, Dana here." in out
    assert out.index("A person has joined.") < out.index("Hi, Dana here.")


async def test_control_sequences_in_what_is_shown_do_not_reach_the_terminal(capsys):
    # A reply quotes the knowledge base (a Markdown or text file, a PDF, are read with their control
    # characters) and an operator's text is theirs: an escape sequence in either reached the terminal
    # as a command to it (OSC 52 writes the clipboard, others retitle or clear it, or hide text).
    planted = "Reset it in Settings.\x1b]52;c;Y3VybCBldmlsLnNoIHwgc2g=\x07\x1b[2J\x9b31m done"
    typed = iter(["how do I reset?", ""])

    async def ask(text: str) -> dict:
        return {"reply": planted, "citations": [{"title": "Guide\x1b[8m", "source": "g.md", "url": None}]}

    assert await terminal_chat.converse("acme", ask, read_line=lambda prompt: next(typed)) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "\x9b" not in out
    assert "acme> Reset it in Settings.]52;c;Y3VybCBldmlsLnNoIHwgc2g=[2J31m done" in out and "[1] Guide[8m — g.md" in out


async def test_ctrl_d_at_the_prompt_ends_the_line_it_left_open(capsys):
    # Ctrl-D echoes nothing, so the shell's prompt came after "you> " on the same line.
    def read(prompt: str) -> str:
        print(prompt, end="")  # as a read of standard input does
        raise EOFError

    async def ask(text: str) -> dict:
        raise AssertionError("nothing was typed")

    assert await terminal_chat.converse("acme", ask, read_line=read) == 0
    assert capsys.readouterr().out.endswith("you> \n")


def test_ctrl_c_at_the_prompt_quits_at_once():
    # The prompt's input() ran in asyncio's default executor, which asyncio.run waits for as it ends: Ctrl-C
    # cancelled the chat, then the process hung on the input() no one would finish, until the user pressed Enter.
    import signal
    import subprocess
    import sys

    from tests.conftest import ROOT

    script = ("import asyncio, sys\nfrom gateway.terminal_chat import converse\nasync def ask(text): return {}\n"
              "try:\n    asyncio.run(converse('acme', ask))\nexcept KeyboardInterrupt:\n    sys.exit(130)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        shown = "Chatting with 'acme'. Empty line or Ctrl-D to quit.\nyou> "
        assert proc.stdout.read(len(shown)) == shown  # waiting at the prompt, its stdin open
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 130, proc.stderr.read()
        assert proc.stdout.read() == "\n"  # the prompt's line ended, as after Ctrl-D
    finally:
        proc.kill()
        proc.wait()
