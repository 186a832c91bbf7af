"""`gateway <command> --help` explains every option it lists."""

import argparse

from gateway.cli import _parser


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """Each command's parser, by its words (`db upgrade`), the ones that only hold subcommands left out."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield " ".join(path), parser
    for action in subs:
        for name, sub in action.choices.items():
            yield from _commands(sub, (*path, name))


def test_every_option_of_every_command_has_a_help_text():
    """`--host`, `--port`, `--bot`, `--source`, `--docs`, `--questions` and eval's `--json` were listed with no
    word on what they take, nor on `--port`'s default or the questions file's format."""
    commands = dict(_commands(_parser()))
    assert set(commands) == {"serve", "ingest", "ingest-runs", "eval", "chat", "db upgrade", "forget",
                             "telegram set-webhook"}
    silent = [f"{name} {action.option_strings[-1]}" for name, parser in commands.items()
              for action in parser._actions if action.option_strings and not action.help]
    assert silent == []
    assert "$PORT" in commands["serve"].format_help() and "JSONL" in commands["eval"].format_help()
