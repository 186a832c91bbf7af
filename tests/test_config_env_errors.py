"""Values from the environment: a bad override (DATABASE_URL, ENVIRONMENT, …) says it came from there, and a
secret is read without the newline a secret file ends with."""

from __future__ import annotations

import re

import pytest

from channels.base import RawRequest
from channels.slack import SlackAdapter
from gateway.errors import ConfigError
from gateway.settings import load_settings
from tests.conftest import write_config
from tests.fakes.slack_api import sign


@pytest.mark.parametrize("name, value, key", [
    ("ENVIRONMENT", "prod", "environment"),  # was "environment: Input should be …", of a file without the key
    ("DATABASE_URL", "mysql://db/gateway", "database_url"),
    ("log_format", "xml", "log_format"),
])
def test_a_bad_override_from_the_environment_names_its_variable(tmp_path, monkeypatch, name, value, key):
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as caught:
        load_settings(write_config(tmp_path))
    assert caught.value.key == key
    assert str(caught.value).endswith(f"(from the environment variable {name}, which overrides the file)")


def test_a_bad_value_in_the_file_names_no_variable(tmp_path, monkeypatch):
    monkeypatch.delenv("DATABASE_URL", raising=False)
    with pytest.raises(ConfigError) as caught:
        load_settings(write_config(tmp_path, database_url="mysql://db/gateway"))
    assert "environment variable" not in str(caught.value)


def test_settings_reads_secrets_without_the_newline_a_secret_file_ends_with(tmp_path, monkeypatch):
    # `kubectl create secret --from-file`, `$(cat secret.txt)` in a compose file, `echo` into a file: the
    # value ends in a newline. Kept, every Slack request failed its signature (401 for ever), as did every
    # Twilio one and every call with the API key, with nothing saying why.
    monkeypatch.setenv("SLACK_SIGNING", "8f742231b10e8888abcd99yyyzzz85a5\n")
    monkeypatch.setenv("SLACK_BOT", " xoxb-1-2-abc\r\n")
    path = write_config(tmp_path, bots=[{"name": "b", "channels": {"slack": {
        "bot_token": "${SLACK_BOT}", "signing_secret": "${SLACK_SIGNING}"}}}])
    slack = load_settings(path).bots[0].channels.slack
    assert (slack.signing_secret, slack.bot_token) == ("8f742231b10e8888abcd99yyyzzz85a5", "xoxb-1-2-abc")
    body = b'{"type": "url_verification", "challenge": "c"}'
    SlackAdapter("b", slack).verify(RawRequest(url="https://gw.example.com/webhooks/b/slack/events", query={}, body=body,
                                               headers=sign(body, secret="8f742231b10e8888abcd99yyyzzz85a5")))


def test_log_format_is_read_in_any_case_as_log_level_is(tmp_path, monkeypatch):
    # `LOG_FORMAT=JSON` (the environment's usual capitals) was "log_format: Input should be 'console' or 'json'".
    monkeypatch.setenv("LOG_FORMAT", "JSON")
    monkeypatch.setenv("LOG_LEVEL", "debug")
    settings = load_settings(write_config(tmp_path, log_format="console"))
    assert (settings.log_level, settings.log_format) == ("DEBUG", "json")
    monkeypatch.setenv("LOG_FORMAT", "xml")
    with pytest.raises(ConfigError, match="log_format"):
        load_settings(write_config(tmp_path))


def test_an_http_tools_credential_is_read_without_the_newline_a_secret_file_ends_with(tmp_path, monkeypatch):
    # A tool's header or URL query credential is a secret under another key's name: "Bearer ${ORDERS_TOKEN}"
    # kept the newline, and every call of the tool failed (an illegal header value; %0A in the query).
    monkeypatch.setenv("ORDERS_TOKEN", "sk-live-1234\n")
    monkeypatch.setenv("ORDERS_KEY", "k-5678\r\n")
    tool = {"name": "orders", "type": "http", "url": "https://api.example/orders/{id}?api_key=${ORDERS_KEY}&v=2",
            "headers": {"Authorization": "Bearer ${ORDERS_TOKEN}"},
            "parameters": {"type": "object", "properties": {"id": {"type": "string"}}}}
    spec = load_settings(write_config(tmp_path, bots=[{"name": "b", "tools": [tool]}])).bots[0].tools[0]
    assert spec.headers == {"Authorization": "Bearer sk-live-1234"}
    assert spec.url == "https://api.example/orders/{id}?api_key=k-5678&v=2"


@pytest.mark.parametrize("channels", [
    "{telegram: {token: ${CFG_TG_TOKEN}, webhook_secret: ${CFG_TG_SECRET}}}",
    "{web: {}, telegram: {token: \"${CFG_TG_TOKEN}\", webhook_secret: ${CFG_TG_SECRET:-s3cret}}}",
], ids=["first-unquoted", "second-unquoted"])
def test_an_unquoted_env_var_inside_braces_says_to_quote_it(tmp_path, monkeypatch, channels):
    # YAML reads `{token: ${VAR}}` as a nested mapping opened after "$": the error was only PyYAML's "expected ','
    # or '}', but got '{'", with nothing about the ${VAR} that every secret must be written as.
    monkeypatch.setenv("CFG_TG_TOKEN", "123456:abc")
    monkeypatch.setenv("CFG_TG_SECRET", "s3cret")
    path = tmp_path / "config.yaml"
    path.write_text(f"bots:\n  - name: acme\n    channels: {channels}\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    var = "${CFG_TG_TOKEN}" if channels.startswith("{telegram") else "${CFG_TG_SECRET:-s3cret}"
    assert str(caught.value).endswith(f"(while parsing a flow mapping); a ${{VAR}} inside {{ }} or [ ] must be "
                                      f"quoted: write \"{var}\""), str(caught.value)
    quoted = re.sub(r'(?<!")(\$\{[^}]*\})', r'"\1"', channels)  # as the message says, every one
    path.write_text(f"bots:\n  - name: acme\n    channels: {quoted}\n")
    assert load_settings(path).bots[0].channels.telegram.token == "123456:abc"


@pytest.mark.parametrize(("text", "hint"), [
    ("operators:\n  - {name: sam, token: \"${SAM_TOKEN}\", bots: [*]}\n",
     '; a * alone starts a YAML alias: write it in quotes, as bots: ["*"]'),
    ("bots:\n  - name: acme\n    system_prompt: *Note*: be brief\n",
     '; a value that begins with * is read as a YAML alias: write the value in quotes ("*Note*: …")'),
    ("bots:\n  - name: acme\n\tmodel: offline\n", "; YAML indents with spaces, never a tab: replace the tab with spaces"),
    ("bots:\n  - name: acme\n    fallback_text: \"Sorry\"\n      model: offline\n",
     "; check the indentation of line 4: the keys of one mapping, and the items of one list, start in the same "
     "column"),
    ("bots:\n  - name: acme\n    fallback_text: Sorry\n      model: offline\n",  # read as the text's second line
     "; check the indentation of line 4: the keys of one mapping, and the items of one list, start in the same "
     "column"),
    ("bots:\n  - name: acme\n    fallback_text: Sorry: we are closed\n",
     '; a value with ": " in it must be quoted: write fallback_text: "Sorry: we are closed"'),
    ("bots:\n  - name: acme\n    model:offline\n    fallbacks: []\n",
     "; line 3 is no `key: value`: a key needs a space after its colon (model: offline)"),
    ("bots:\n  - name: acme\n    system_prompt: You are\n    kind and brief\n    model: offline\n",
     "; line 4 is no `key: value`: a key needs a space after its colon, and a text over several lines goes "
     "in quotes or under `key: >`, indented below it"),
    ("bots:\n  - name: acme\n    fallback_text: \"Sorry, we are closed\n    model: offline\n",
     "; the \" at line 3, column 20 is never closed: write fallback_text: \"Sorry, we are closed\""),
    ("bots: ['acme, beta]\n", "; the ' at line 1, column 8 is never closed: end its text with another '"),
    ("bots:\n  -name: acme\n    model: offline\n",
     "; line 2 is no list item: a dash needs a space after it (- name: acme)"),
    ("operators:\n  - name: sam\n    bots:\n      - acme\n      -beta\n",
     "; line 5 is no list item: a dash needs a space after it (- beta)"),
], ids=["bare-star", "star-first", "tab", "indented-deeper", "indented-under-a-text", "colon-in-value", "no-space-after-colon",
        "text-over-lines", "unclosed-quote", "unclosed-quote-in-brackets", "no-space-after-dash", "no-space-after-dash-of-a-word"])
def test_a_yaml_slip_a_newcomer_makes_says_how_to_write_it(tmp_path, text, hint):
    # `bots: [*]` was "expected alphabetic or numeric character, but found ']' (while scanning an alias)", a tab
    # "found character '\t' that cannot start any token", a key indented too far "expected <block end>, but found
    # '<block mapping start>'", a colon in a value "mapping values are not allowed here" and `model:offline` "could
    # not find expected ':'" (on the line after it), a quote never closed "found unexpected end of stream" (at the
    # file's end) and `-name: acme` the indentation hint or "expected <block end>, but found '-'": true, and no word
    # on what to write instead.
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    assert str(caught.value).endswith(hint), str(caught.value)


@pytest.mark.parametrize("value", ["Sorry: we are closed", r"Put it in C:\Docs: then run it", r"Mind \n: it's kept"],
                         ids=["plain", "backslash", "backslash-and-quote"])
def test_the_quoted_value_a_colon_slip_suggests_loads_as_written(tmp_path, value):
    """The hint's own line, written as told, must load with the value intact: in double quotes a backslash
    is an escape, so `C:\\Docs: then` became '"C:\\Docs: then"', a second error (\\D is no escape) or another text."""
    path = tmp_path / "config.yaml"
    path.write_text(f"bots:\n  - name: acme\n    fallback_text: {value}\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    suggested = str(caught.value).split("must be quoted: write ", 1)[1]
    path.write_text(f"bots:\n  - name: acme\n    {suggested}\n")
    assert load_settings(path).bots[0].fallback_text == value


SECRET = "sk-live-Ab12Cd34Ef56Gh78Ij90"


@pytest.mark.parametrize(("text", "hint"), [
    (f"models:\n  - model_name: m\n    litellm_params:\n      model: x\n      api_key:{SECRET}\n      timeout: 30\n",
     "; line 5 is no `key: value`: a key needs a space after its colon (api_key: …)"),
    (f"bots:\n  - name: acme\n    channels:\n      telegram: {{token: \"{SECRET}}}\n    model: offline\n",
     "; the \" at line 4, column 25 is never closed: end its text with another \""),
    (f"bots:\n  - name: acme\n    channels:\n      slack:\n        signing_secret: \"{SECRET}\n",
     "; the \" at line 5, column 25 is never closed: write signing_secret: \"…\""),
    (f"models:\n  - model_name: m\n    litellm_params:\n      api_key: Bearer: {SECRET}\n",
     '; a value with ": " in it must be quoted: write api_key: "…"'),
    (f"operators:\n  - name: sam\n    bots:\n      - acme\n      -{SECRET}\n",
     "; line 5 is no list item: a dash needs a space after it (- …)"),
    (f"bots:\n  - name: acme\n    model:{SECRET}\n    fallbacks: []\n",
     "; line 3 is no `key: value`: a key needs a space after its colon (model: …)"),
], ids=["glued-key", "unclosed-in-braces", "unclosed", "colon-in-value", "dash", "secret-under-another-key"])
def test_a_yaml_slip_on_a_line_with_a_secret_does_not_echo_it(tmp_path, text, hint):
    """The hints that say how to write a slipped line quoted its value: a literal key written on it (`api_key:sk-…`,
    before the file refuses it) went to the terminal, the log of `gateway serve` and CI's output. The line's number
    and key are shown, the value of a key named like a credential, or that looks like one, is not."""
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    said = str(caught.value)
    assert SECRET not in said and SECRET[:12] not in said and said.endswith(hint), said


@pytest.mark.parametrize("model", ["BAAI/bge-small-en-v1.5", "meta-llama/Llama-3.1-8B-Instruct"])
def test_a_yaml_slip_on_a_model_line_still_shows_the_model_it_names(tmp_path, model):
    """A Hugging Face model id (`org/Name-7B`: mixed case and digits, 20 characters and more) read as a key, and the
    hint said `(model: …)` where the model's name, which the config needs, should be; keys hold no `org/` name."""
    path = tmp_path / "config.yaml"
    path.write_text(f"bots:\n  - name: acme\n    model:{model}\n    fallbacks: []\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    assert str(caught.value).endswith(f"a key needs a space after its colon (model: {model})"), str(caught.value)


def test_a_missing_secret_names_its_own_unset_variable_not_another_channels(tmp_path, monkeypatch):
    # Both unset: the error is Telegram's token, and it named ${SLACK_BOT_TOKEN}, the first unset key under
    # bots[0].channels, as the variable that left it empty.
    for name in ("TG_TOKEN_UNSET", "SLACK_BOT_UNSET", "SLACK_SIGNING_UNSET"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ConfigError) as caught:
        load_settings(write_config(tmp_path, bots=[{"name": "b", "channels": {
            "slack": {"bot_token": "${SLACK_BOT_UNSET}", "signing_secret": "${SLACK_SIGNING_UNSET}"},
            "telegram": {"token": "${TG_TOKEN_UNSET}"}}}]))
    said = str(caught.value)
    assert "SLACK_BOT_UNSET" not in said and "SLACK_SIGNING_UNSET" not in said, said
    assert "(${TG_TOKEN_UNSET} is not set, so bots[0].channels.telegram.token is empty)" in said, said
