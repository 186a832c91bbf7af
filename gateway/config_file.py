"""Reading config.yaml: `${VAR}` interpolation and the secrets-from-the-environment rule (a validation error's
location: `gateway.config_errors`)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml

from gateway.config_yaml import load_yaml
from gateway.errors import ConfigError

SECRET_KEYS = frozenset(
    {"token", "webhook_secret", "bot_token", "signing_secret", "app_token", "auth_token", "api_key"}
)
# `dev-operator-token` is what `make run` sets OPERATOR_TOKEN to unless told otherwise, and the README prints
# it: in production it let anyone sign in to the operator console and API.
DEMO_OPERATOR_TOKEN = "dev-operator-token"
PLACEHOLDER_SECRETS = frozenset({"", "changeme", "change-me", "secret", "xxx", "todo", "placeholder", "test",
                                 DEMO_OPERATOR_TOKEN})
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
# An http tool's header or URL query value named like a credential is a secret under another key's name.
_SECRET_NAME = re.compile(r"auth|api[-_]?key|access[-_]?key|subscription[-_]?key|token|secret|passw|cookie|credential",
                          re.IGNORECASE)
_TOOL = re.compile(r"(^|\.)tools\[\d+\]$")


def secret_values(data: Any, path: str = "") -> list[tuple[str, str]]:
    """(dotted path, value) of every string under a `SECRET_KEYS` key in a config dict, at any depth:
    what production refuses empty or a placeholder, and what the logs redact."""
    found: list[tuple[str, str]] = []
    if isinstance(data, dict):
        for key, value in data.items():
            sub = f"{path}.{key}" if path else str(key)
            if key in SECRET_KEYS and isinstance(value, str):
                found.append((sub, value))
            else:
                found.extend(secret_values(value, sub))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            found.extend(secret_values(value, f"{path}[{i}]"))
    return found


_CHANNEL_KEY = re.compile(r"\.channels\.(\w+)\.(\w+)$")


def _secret_var(path: str) -> str:
    """The `${VAR}` to write a literal secret as: a channel's as a missing one's hint names it."""
    from gateway.channel_settings import env_name  # it imports this module
    match = _CHANNEL_KEY.search(path)
    return f"{env_name(*match.groups())} and set that variable" if match else "${SOME_ENV_VAR}"


def _interpolate(data: Any, env: dict[str, str], path: str = "", defaulted: list[str] | None = None,
                 unset: dict[str, str] | None = None, secret_vars: dict[str, str] | None = None) -> Any:
    """Replace `${VAR}` everywhere; refuse literal secrets; name the key on any problem. The paths of
    secrets that took the default of `${VAR:-default}` (VAR unset) are added to `defaulted`, each
    key whose `${VAR}` (without a default) is unset is recorded in `unset` with the variable's name, and
    each secret's `${VAR}` in `secret_vars` (key -> VAR)."""
    if isinstance(data, dict):
        out = {}
        for key, value in data.items():
            sub = f"{path}.{key}" if path else str(key)
            if key in SECRET_KEYS and isinstance(value, str) and value:
                ref = _ENV_REF.fullmatch(value.strip())
                if ref is None and value.strip().startswith("os.environ/"):  # LiteLLM proxy's own form
                    var = value.strip().removeprefix("os.environ/")
                    raise ConfigError(sub, f"write it as ${{{var}}}: this file reads a variable as ${{VAR}}, "
                                           "not LiteLLM's os.environ/VAR")
                if ref is None:
                    raise ConfigError(sub, f"secrets come from the environment only; write it as {_secret_var(sub)}")
                if ref.group(1) not in env and ref.group(2) and defaulted is not None:
                    defaulted.append(f"{sub} (${{{ref.group(1)}}} is not set)")
                if secret_vars is not None:
                    secret_vars[sub] = ref.group(1)
            if _TOOL.search(path):
                _refuse_literal_tool_secret(key, value, sub)
            # An http tool's headers and URL hold its credentials: read as secrets are, without the newline
            # a secret file ends with (kept, every call of the tool failed).
            tool_secrets = _TOOL.search(path) and key in ("headers", "url")
            out[key] = _interpolate(value, {k: v.strip() for k, v in env.items()} if tool_secrets else env, sub,
                                    defaulted, unset, secret_vars)
            if key in SECRET_KEYS and isinstance(out[key], str):
                # A secret file's trailing newline is never part of the secret: kept, every signature
                # (Slack, Twilio) and every sign-in with it failed, with nothing saying why.
                out[key] = out[key].strip()
        return out
    if isinstance(data, list):
        return [_interpolate(v, env, f"{path}[{i}]", defaulted, unset, secret_vars) for i, v in enumerate(data)]
    if isinstance(data, str):

        def sub(match: re.Match[str]) -> str:
            name, default = match.group(1), match.group(2)
            if name in env:
                return env[name]
            if default is not None:
                return default
            # An unset variable becomes empty; required keys then fail with their own message, and
            # `name_unset_variable` adds the variable's name to it.
            if unset is not None:
                unset.setdefault(path, name)
            return ""

        return _ENV_REF.sub(sub, data)
    return data


def _refuse_literal_tool_secret(key: Any, value: Any, path: str) -> None:
    """An http tool's `headers: {Authorization: "Bearer sk-…"}` or `url: …?api_key=sk-…` was a literal secret
    the file kept, against "secrets come from the environment only"; `${VAR}` anywhere in the value (as in
    "Bearer ${API_TOKEN}") or a `{parameter}` of the URL template is not one."""
    from urllib.parse import parse_qsl, urlsplit

    if key == "headers" and isinstance(value, dict):
        named = [(f"{path}.{name}", text) for name, text in value.items() if _SECRET_NAME.search(str(name))]
    elif key == "url" and isinstance(value, str):
        named = [(f"{path} (query {name})", text) for name, text in parse_qsl(urlsplit(value).query)
                 if _SECRET_NAME.search(name) and "{" not in text]
    else:
        return
    for where, text in named:
        if isinstance(text, str) and text.strip() and not _ENV_REF.search(text):
            raise ConfigError(where, "secrets come from the environment only; write it with ${SOME_ENV_VAR}, "
                                     "as \"Bearer ${API_TOKEN}\"")


def resolve_config_path(explicit: str | os.PathLike[str] | None = None) -> Path:
    """`--config`, else `$GATEWAY_CONFIG`, else `./config.yaml`."""
    return Path(explicit or os.environ.get("GATEWAY_CONFIG") or "config.yaml")


def _origin(config_path: Path, explicit: str | os.PathLike[str] | None) -> str:
    """Where a config file that is not there was looked for: run from another folder, a bare
    "config.yaml" named no folder, nor how to give another file."""
    said = [] if config_path.is_absolute() else [f"{config_path.absolute()}, relative to the working directory"]
    if explicit is None and os.environ.get("GATEWAY_CONFIG"):
        said.append("from $GATEWAY_CONFIG")
    elif explicit is None:
        said.append("give --config FILE or set GATEWAY_CONFIG")
    return "; ".join(said) or "from --config"


def read_config(path: str | os.PathLike[str] | None = None, *, unset: dict[str, str] | None = None,
                secret_vars: dict[str, str] | None = None, keys: frozenset[str] | None = None) -> dict[str, Any]:
    """The config file's mapping, interpolated, with `config_path` set; `unset` gets the keys whose
    `${VAR}` is not set (key -> VAR), `secret_vars` each secret key's `${VAR}` (key -> VAR). With `keys`,
    only those top-level keys, the rest neither interpolated nor checked, but for a key that reads as one of
    them misspelt. Raises `ConfigError`."""
    config_path = resolve_config_path(path)
    environ = dict(os.environ)
    try:
        text = config_path.read_text(encoding="utf-8")
        raw = load_yaml(text, config_path)  # None: an empty file (or comments alone), no settings
    except FileNotFoundError:
        raise ConfigError("", f"config file not found: {config_path} ({_origin(config_path, path)})") from None
    except IsADirectoryError:
        raise ConfigError("", f"{config_path} is a folder, not a config file: give the file, as "
                              f"{config_path / 'config.yaml'}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError("", f"{config_path} is not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at position "
                              f"{exc.start}): save it as UTF-8") from None
    except OSError as exc:  # permission denied, say: one line, not a traceback
        raise ConfigError("", f"cannot read {config_path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError("", f"{config_path} is not valid YAML: {_yaml_problem(exc)}{_yaml_hint(exc, text)}") from None
    except RecursionError:  # PyYAML reads each level of nesting a call deeper
        raise ConfigError("", f"{config_path} is not valid YAML: it is nested too deeply to read "
                              "(hundreds of levels of lists or mappings)") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError("", f"{config_path} must hold a mapping at the top level")
    if keys is not None:
        import difflib

        for key in raw:  # a misspelt wanted key was not read at all: its default (SQLite) was taken for it
            near = difflib.get_close_matches(str(key), sorted(keys.difference(raw)), n=1, cutoff=0.75)
            if key not in keys and near:
                raise ConfigError(str(key), f"unknown key; did you mean {near[0]}?")
        raw = {key: value for key, value in raw.items() if key in keys}
    defaulted: list[str] = []
    data = _interpolate(raw, environ, defaulted=defaulted, unset=unset, secret_vars=secret_vars)
    # `${VAR:-default}` under a secret key is a development convenience: in production the default
    # would be a secret written in the file (and often shared, as in an example config).
    # Read as pydantic-settings reads it: the variable's name in any case, and the value as written.
    environment = next((v for k, v in environ.items() if k.lower() == "environment"), None) or data.get("environment")
    if defaulted and environment == "production":
        raise ConfigError(defaulted[0].split(" ", 1)[0],
                          f"a secret's default is for development only; {defaulted[0].split(' ', 1)[1][1:-1]} in production")
    data["config_path"] = str(config_path)
    return data


def name_unset_variable(error: ConfigError, unset: dict[str, str],
                        overrides: frozenset[str] = frozenset()) -> ConfigError:
    """`error`, naming the unset `${VAR}` that left its key (a key under it its problem names, one above) empty; not of
    a key the environment gave (one of `overrides`), whose value is neither empty nor the file's."""
    if error.problem.startswith("unknown key") or not error.key:  # a misspelt key's value is not what is wrong
        return error
    if _env_override(error.key, overrides) is not None:
        return error
    for key, name in unset.items():
        under = key.startswith((f"{error.key}.", f"{error.key}[")) and key[len(error.key):].lstrip(".") in error.problem
        if key == error.key or under or error.key.startswith((f"{key}.", f"{key}[")):  # not slack's, for telegram's
            problem = re.sub(r" \(write it as \$\{\w+\} and set that variable\)", "", error.problem)
            problem = problem.replace(" (an unset ${VAR}?)", "").replace("; an unset ${VAR}?", "")
            return ConfigError(error.key, f"{problem} (${{{name}}} is not set, so {key} is empty)")
    return error


def name_env_override(error: ConfigError, overrides: frozenset[str]) -> ConfigError:
    """`error`, saying the value came from the environment when a variable of an overridable key's name
    (any case) gave it: a stray ENVIRONMENT=prod read as "environment: Input should be …" of a file that
    has no such key."""
    if (name := _env_override(error.key, overrides)) is not None:
        return ConfigError(error.key, f"{error.problem} (from the environment variable {name}, which overrides the file)")
    return error


def _env_override(key: str, overrides: frozenset[str]) -> str | None:
    """The environment variable (its name in any case) that gives `key`, one of `overrides`, or None."""
    if key in overrides:
        for name in os.environ:
            if name.lower() == key:
                return name
    return None


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """PyYAML's error in one line: what it expected and where (its own text quotes the file over lines)."""
    problem = getattr(exc, "problem", None)
    mark = getattr(exc, "problem_mark", None)
    if not problem:
        return " ".join(str(exc).split())
    context = getattr(exc, "context", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"{problem}{where}" + (f" ({context})" if context else "")


def _yaml_hint(exc: yaml.YAMLError, text: str) -> str:
    """What to write instead, for the YAML slips PyYAML's own words do not explain: a `${VAR}` written bare inside
    `{ }` or `[ ]` (`{token: ${TOKEN}}`), which YAML reads as a mapping opened after "$" ("expected ',' or '}',
    but got '{'"), a bare `*` (`bots: [*]`, an alias with no name) and a tab in the indentation."""
    mark, context = getattr(exc, "problem_mark", None), str(getattr(exc, "context", ""))
    if context == "while scanning an alias":  # `bots: [*]`, or a prompt that begins "*Note*:"
        line = text.splitlines()[mark.line] if mark is not None and mark.line < len(text.splitlines()) else ""
        if re.search(r"[\[,]\s*\*\s*[\],]|-\s+\*\s*$", line):
            return '; a * alone starts a YAML alias: write it in quotes, as bots: ["*"]'
        return '; a value that begins with * is read as a YAML alias: write the value in quotes ("*Note*: …")'
    problem = str(getattr(exc, "problem", ""))
    if "'\\t'" in problem:
        return "; YAML indents with spaces, never a tab: replace the tab with spaces"
    if context == "while scanning a quoted scalar" and problem == "found unexpected end of stream":
        return _unclosed_quote_hint(getattr(exc, "context_mark", None), text.splitlines())
    if block := _block_hint(exc, problem, text.splitlines()):
        return block
    if mark is None or "flow" not in context or not 0 < mark.column:
        return ""
    line = text.splitlines()[mark.line] if mark.line < len(text.splitlines()) else ""
    if line[mark.column - 1:mark.column + 1] != "${" or (end := line.find("}", mark.column)) < 0:
        return ""
    return f'; a ${{VAR}} inside {{ }} or [ ] must be quoted: write "{line[mark.column - 1:end + 1]}"'


def _unclosed_quote_hint(start, lines: list[str]) -> str:
    """What to write for a quote never closed (`fallback_text: "Sorry`), which PyYAML reads as a text running to
    the file's end, and tells there ("found unexpected end of stream"), not at the quote."""
    if start is None or start.line >= len(lines) or start.column >= len(lines[start.line]):
        return ""
    line, quote = lines[start.line], lines[start.line][start.column]
    where = f"the {quote} at line {start.line + 1}, column {start.column + 1} is never closed"
    if plain := re.fullmatch(rf"\s*(?:-\s+)?([\w.-]+):\s+{quote}([^\"']*?)\s*", line):
        return f"; {where}: write {plain[1]}: {quote}{_shown(plain[1], plain[2])}{quote}"
    return f"; {where}: end its text with another {quote}"


# A value that reads as a credential whatever its key: a provider's key prefix, a long hex string, or a long word
# of mixed case and digits (a Telegram token); not `text-embedding-3-small`, `openai/gpt-4o-mini`, nor a model id
# of one `/` and a `-` or `.` (`BAAI/bge-small-en-v1.5`): a key's base64 has no `-` beside its `/`s.
_SECRET_LOOKING = re.compile(r"(sk|pk|rk|hf|ghp|gho|glpat|github_pat|xox[abpr]|xapp)[-_]\w{8,}.*|(AKIA|AIza)\w{12,}"
                             r"|[0-9a-fA-F]{24,}|(?!(?=[^/]*/[^/]*$)\S*[-.])(?=\S*\d)(?=\S*[a-z])(?=\S*[A-Z])[\w:.+/=-]{20,}")


def _shown(key: str, value: str) -> str:
    """`value` as a hint may quote it: `…` in its place when its key is named like a credential (`api_key`,
    `signing_secret`, a header's `Authorization`) or it looks like one, and it is no `${VAR}`. A hint echoed the
    slipped line, and a key written there in the clear (`api_key:sk-…`, before the file refuses it) went to the
    terminal, `gateway serve`'s log and CI's output."""
    from gateway.url_secrets import is_credential_name

    if not value.strip() or _ENV_REF.fullmatch(value.strip()):
        return value
    named = key in SECRET_KEYS or bool(_SECRET_NAME.search(key)) or is_credential_name(key)
    return "…" if named or _SECRET_LOOKING.fullmatch(value.strip()) else value


def _block_hint(exc: yaml.YAMLError, problem: str, lines: list[str]) -> str:
    """What to write instead, for the block-style slips whose PyYAML words name its parser's states: a key
    indented more or less than its neighbours ("expected <block end>, but found '<block mapping start>'", or under
    a text, which YAML reads as the text's next line, "mapping values are not allowed here"), a value holding ": "
    (the same words, at its second colon) and a line that is no `key: value`, as `model:offline` or a text's
    second line ("could not find expected ':'", told at the line after it), and a list item with no space after
    its dash (`-name: acme`, told at its line or the next)."""
    mark, start = getattr(exc, "problem_mark", None), getattr(exc, "context_mark", None)
    if mark is None:
        return ""
    for number in range(min(mark.line, len(lines) - 1), max(mark.line - 2, -1), -1):
        if dashed := re.fullmatch(r"\s*-([^\s-].*)", lines[number]):
            key, colon, value = dashed[1].rstrip().partition(": ")
            item = f"{key}: {_shown(key, value)}" if colon else _shown("", key)
            return f"; line {number + 1} is no list item: a dash needs a space after it (- {item})"
    indentation = (f"; check the indentation of line {mark.line + 1}: the keys of one mapping, and the items of "
                   "one list, start in the same column")
    if re.fullmatch(r"expected <block end>, but found '<block (mapping|sequence) start>'", problem):
        return indentation
    if problem == "mapping values are not allowed here" and mark.line < len(lines):
        if lines[mark.line].find(":") == mark.column:  # a line's own key, read as the line before's text going on
            return indentation
        key, _, value = lines[mark.line].strip().partition(": ")
        if value and not value.startswith(("'", '"')) and '"' not in value and " #" not in value:
            if _shown(key, value) != value:  # a credential's: the line's number and key alone
                return f'; a value with ": " in it must be quoted: write {key}: "…"'
            # In double quotes a backslash is an escape (C:\Docs: an error, \n a line break): single ones then.
            quoted = "'" + value.replace("'", "''") + "'" if "\\" in value else f'"{value}"'
            return f'; a value with ": " in it must be quoted: write {key}: {quoted}'
        return '; a value with ": " in it must be quoted'
    if problem == "could not find expected ':'" and start is not None and start.line < len(lines):
        line = lines[start.line].strip()
        if glued := re.fullmatch(r"(-\s+)?([\w.-]+):(?!//)(\S.*)", line):
            return (f"; line {start.line + 1} is no `key: value`: a key needs a space after its colon "
                    f"({glued[2]}: {_shown(glued[2], glued[3])})")
        return (f"; line {start.line + 1} is no `key: value`: a key needs a space after its colon, and a text over "
                "several lines goes in quotes or under `key: >`, indented below it")
    return ""
