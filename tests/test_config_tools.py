"""A tool that cannot work is a config error when the file is read, not a traceback at every call."""

from __future__ import annotations

import pytest

from gateway.errors import ConfigError
from gateway.settings import load_settings
from tests.conftest import write_config

HTTP = {"type": "http", "url": "https://api.example/weather/{city}",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}


@pytest.mark.parametrize("tools, key, problem", [
    # Offered to the model, then "unknown tool" or a traceback when it called them.
    ([{"name": "escalate", "type": "builtin"}], "bots[0].tools[0]",
     "there is no built-in tool 'escalate'; the built-in tools are escalate_to_human (a tool of your own is a "
     "python or an http tool)"),
    ([{"name": "weather", "type": "http"}], "bots[0].tools[0]",
     "an http tool needs `url`, the endpoint (a template such as https://api.example.com/orders/{order_id})"),
    ([{"name": "weather", **HTTP, "method": "FETCH"}], "bots[0].tools[0].method",
     "unknown HTTP method 'FETCH'; use one of GET, POST, PUT, PATCH, DELETE"),
    ([{"name": "weather", **HTTP}, {"name": "weather", **HTTP, "method": "POST"}], "bots[0].tools",
     "bot 'acme' has two tools named 'weather' (tools[0] and tools[1]); tool names must be unique"),
    ([{"name": "weather", **HTTP, "url": "api.example/weather/{city}"}], "bots[0].tools[0]",
     "`url` 'api.example/weather/{city}' is not an http(s) URL with a host"),
    ([{"name": "weather", **HTTP, "url": "https://api.example/weather/{city"}], "bots[0].tools[0]",
     "`url` is not a valid template (expected '}' before end of string); write a literal brace as {{ or }}"),
    ([{"name": "weather", **HTTP, "url": "https://api.example/weather/{0}"}], "bots[0].tools[0]",
     "`url` field {0} is not a parameter name; write one as {name}"),
    # A field in the host let a call choose the server: with x=".evil.com", api.example.com.evil.com.
    ([{"name": "weather", **HTTP, "url": "https://api.example.com{city}/v1"}], "bots[0].tools[0]",
     "`url` field {city} is in the scheme, host or port of 'https://api.example.com{city}/v1', so a call could "
     "choose which server it goes to; put fields only in the path or the query"),
    ([{"name": "weather", **HTTP, "url": "https://api.example.com:{city}/v1"}], "bots[0].tools[0]",
     "`url` field {city} is in the scheme, host or port of 'https://api.example.com:{city}/v1', so a call could "
     "choose which server it goes to; put fields only in the path or the query"),
    ([{"name": "weather", **HTTP, "url": "https://{city}@api.example.com/v1"}], "bots[0].tools[0]",
     "`url` field {city} is in the scheme, host or port of 'https://{city}@api.example.com/v1', so a call could "
     "choose which server it goes to; put fields only in the path or the query"),
    ([{"name": "weather", **HTTP, "import_path": "weather:lookup"}], "bots[0].tools[0]",
     "`import_path` is not read by an http tool"),
    ([{"name": "city weather", **HTTP}], "bots[0].tools[0].name",
     "'city weather' is not a tool name: use 1-64 letters, digits, '_' or '-'"),
    ([{"name": "weather", **HTTP, "timeout": 0}], "bots[0].tools[0].timeout", "Input should be greater than 0"),
])
def test_config_a_tool_that_cannot_work_is_refused_at_load(tmp_path, tools, key, problem):
    config = write_config(tmp_path, bots=[{"name": "acme", "tools": tools}])
    with pytest.raises(ConfigError) as caught:
        load_settings(config)
    assert (caught.value.key, caught.value.problem) == (key, problem)


def test_config_a_method_is_read_in_any_case_and_the_tools_of_two_bots_may_share_a_name(tmp_path):
    config = write_config(tmp_path, bots=[{"name": "acme", "tools": [{"name": "weather", **HTTP, "method": "post"}]},
                                          {"name": "beta", "tools": [{"name": "weather", **HTTP}]}])
    assert [b.tools[0].method for b in load_settings(config).bots] == ["POST", "GET"]


@pytest.mark.parametrize("spec, key", [
    ({"headers": {"Authorization": "Bearer sk-live-1234"}}, "bots[0].tools[0].headers.Authorization"),
    ({"headers": {"X-API-Key": "sk-live-1234"}}, "bots[0].tools[0].headers.X-API-Key"),
    ({"url": "https://api.example/weather/{city}?units=metric&api_key=sk-live-1234"},
     "bots[0].tools[0].url (query api_key)"),
])
def test_config_a_literal_credential_of_an_http_tool_is_refused(tmp_path, spec, key):
    """Loaded as it was: the contract's "secrets come from the environment only" held for `token` and
    `api_key` keys, not for the same secret in a tool's header or URL."""
    config = write_config(tmp_path, bots=[{"name": "acme", "tools": [{"name": "weather", **HTTP, **spec}]}])
    with pytest.raises(ConfigError) as caught:
        load_settings(config)
    assert str(caught.value) == (f"{key}: secrets come from the environment only; write it with ${{SOME_ENV_VAR}}, "
                                 'as "Bearer ${API_TOKEN}"')


def test_config_a_tool_credential_from_the_environment_and_plain_headers_are_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("WEATHER_TOKEN", "sk-live-1234")
    spec = {"headers": {"Authorization": "Bearer ${WEATHER_TOKEN}", "Accept": "application/json",
                        "Idempotency-Key": "fixed"}, "url": "https://api.example/weather/{city}?units=metric&key={key}",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "key": {"type": "string"}}}}
    settings = load_settings(write_config(tmp_path, bots=[{"name": "acme", "tools": [{"name": "weather", **HTTP,
                                                                                        **spec}]}]))
    assert settings.bots[0].tools[0].headers == {"Authorization": "Bearer sk-live-1234", "Accept": "application/json",
                                                 "Idempotency-Key": "fixed"}
