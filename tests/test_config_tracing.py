"""`tracing.otlp_endpoint`: checked when the config is read, as the other URL keys are."""

from __future__ import annotations

import pytest

from gateway.errors import ConfigError
from gateway.settings import load_settings
from tests.conftest import write_config


@pytest.mark.parametrize("endpoint", ["localhost:4317", "htp://collector:4318/v1/traces", "collector", "http://"])
def test_a_tracing_endpoint_that_is_no_http_url_is_a_config_error_naming_the_key(tmp_path, endpoint):
    # It loaded, and the exporter then failed on every batch in the background, tracing seemingly on.
    with pytest.raises(ConfigError, match=r"^tracing\.otlp_endpoint: .* is not an http\(s\) URL with a host"):
        load_settings(write_config(tmp_path, tracing={"otlp_endpoint": endpoint}))


@pytest.mark.parametrize("endpoint, kept", [
    ("http://otel-collector:4318/v1/traces", "http://otel-collector:4318/v1/traces"),
    (" https://otel.example.com/v1/traces ", "https://otel.example.com/v1/traces"),
    ("", None),  # an unset `${VAR}`: tracing off
])
def test_tracing_endpoints_the_exporter_reads_are_kept_and_an_empty_one_means_off(tmp_path, endpoint, kept):
    assert load_settings(write_config(tmp_path, tracing={"otlp_endpoint": endpoint})).tracing.otlp_endpoint == kept
