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


def test_every_command_says_what_it_does_and_names_its_values_as_the_readme_does():
    """`gateway serve --help` began with its options, the command's own purpose left to the overview; and the
    values were named after the options (`--k K` "also report recall@N", `--questions QUESTIONS`)."""
    commands = dict(_commands(_parser()))
    assert [name for name, parser in commands.items() if not parser.description] == []
    usage = {name: " ".join(parser.format_usage().split()) for name, parser in commands.items()}
    assert "[--config FILE] [--host H] [--port P]" in usage["serve"]
    assert "[--config FILE] [--bot NAME] [--source NAME] [--json]" in usage["ingest"]
    assert "[--bot NAME] [--source NAME] [--limit N] [--json]" in usage["ingest-runs"]
    assert "--docs DIR --questions FILE.jsonl [--k N] [--json]" in usage["eval"]
    assert "[--config FILE] [--bot NAME]" in usage["chat"]
    eval_help = " ".join(commands["eval"].format_help().split())
    assert "$GATEWAY_CONFIG or ./config.yaml" in eval_help  # which config it reads without --config
    # The choices are in the usage already: the help says what the value is.
    forget = " ".join(commands["forget"].format_help().split())
    assert "the channel the contact wrote on" in forget


def test_cli_without_a_command_names_the_commands(capsys):
    """`gateway` alone (and `gateway db`, `gateway telegram`) said only "the following arguments are required:
    COMMAND", leaving a first-day user to guess the words or find `--help`."""
    import pytest

    for argv, names in ((["db"], "upgrade"), (["telegram"], "set-webhook"),
                        ([], "serve, ingest, ingest-runs, eval, chat, db, forget, telegram")):
        with pytest.raises(SystemExit) as exit_:
            _parser().parse_args(argv)
        assert exit_.value.code == 2
        assert f"COMMAND (one of: {names})" in capsys.readouterr().err


def test_cli_version_prints_the_packages_version(capsys):
    """`gateway --version` said "the following arguments are required: COMMAND": a newcomer asked for the version
    (to report a bug, or to check an upgrade took) had to find pyproject.toml."""
    import tomllib
    from pathlib import Path

    import pytest

    version = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]["version"]
    with pytest.raises(SystemExit) as exit_:
        _parser().parse_args(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"gateway {version}\n"
