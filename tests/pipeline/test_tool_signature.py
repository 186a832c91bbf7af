"""A python tool is called as `fn(identity, **arguments)`; one that cannot be is a config error at load."""

from __future__ import annotations

import pytest

from gateway.errors import ConfigError
from gateway.models import CallerIdentity
from gateway.pipeline.tools import BotTools
from gateway.settings import BotSettings

CITY = {"type": "object", "properties": {"city": {"type": "string"}}}


def _tools(function: str) -> BotTools:
    return BotTools(BotSettings(name="acme", tools=[{"name": "weather", "type": "python", "parameters": CITY,
                                                     "import_path": f"tests.pipeline.sample_tools:{function}"}]))


@pytest.mark.parametrize("function, mismatch", [
    # `def city_weather(city)`: every call was "invalid arguments: multiple values for argument 'city'".
    ("city_weather", "multiple values for argument 'city'"),
    ("city_weather_with_units", "missing a required argument: 'units'"),
    ("boom", "got an unexpected keyword argument 'city'"),
])
def test_a_python_tool_that_cannot_take_identity_and_its_declared_parameters_is_a_config_error(function, mismatch):
    with pytest.raises(ConfigError) as caught:
        _tools(function)
    assert caught.value.key == "bots.acme.tools.weather.import_path"
    assert caught.value.problem == (
        f"tests.pipeline.sample_tools:{function} cannot be called as {function}(identity, **arguments) with its "
        f"declared parameters ({mismatch}); a python tool's first parameter receives the caller's identity, the "
        "others are the names in `parameters`' properties")


async def test_a_python_tool_that_takes_identity_and_its_declared_parameters_loads_and_runs():
    order = {"type": "object", "properties": {"order": {"type": "string"}}}
    tools = BotTools(BotSettings(name="acme", tools=[
        {"name": "whoami", "type": "python", "import_path": "tests.pipeline.sample_tools:whoami"},
        {"name": "refuse", "type": "python", "import_path": "tests.pipeline.sample_tools:refuse", "parameters": order},
        # A decorator that supplies an argument itself is read by its own signature, (identity, **arguments).
        {"name": "order_status", "type": "python", "import_path": "tests.pipeline.sample_tools:order_status",
         "parameters": order}]))
    outcome = await tools.call("whoami", {}, identity=CallerIdentity(bot="acme", channel="web",
                                                                      contact_external_id="alice"))
    assert outcome.result == {"channel": "web", "contact": "alice"}


def test_a_python_tool_whose_module_is_not_on_the_path_says_to_put_its_folder_on_pythonpath():
    with pytest.raises(ConfigError) as caught:
        BotTools(BotSettings(name="acme", tools=[{"name": "weather", "type": "python", "parameters": CITY,
                                                  "import_path": "weather_tool:city_weather"}]))
    assert caught.value.problem == ("cannot import weather_tool:city_weather: No module named 'weather_tool'; put the "
                                    "folder that holds 'weather_tool' on PYTHONPATH (README: Tools)")
    with pytest.raises(ConfigError) as caught:  # the module is there, the function is not: no path hint
        _tools("no_such_function")
    assert "PYTHONPATH" not in caught.value.problem
