"""A model's provider credentials other than `api_key` (`aws_secret_access_key`, `aws_session_token`,
`vertex_credentials`, `azure_ad_token`, `client_secret` in its `litellm_params`) are the gateway's: a log
line, `/readyz`, a CLI command's error and a provider's error text show them redacted, as they do `api_key`."""

from __future__ import annotations

import json
import logging

import pytest

from gateway.observability.logs import configure_logging_for, redact
from tests.conftest import app_client, docs_source, write_config
from tests.fakes.openai_server import Turn, model_entry

AWS_SECRET = "aws-SECRET-wJalrXUtnFEMI-K7MDENG"
AWS_SESSION = "aws-SESSION-FwoGZXIvYXdzEJr"
AZURE_AD = "azure-AD-eyJ0eXAiOiJKV1Qi"
CLIENT_SECRET = "client-SECRET-8Q~abcDEF"
VERTEX_JSON = json.dumps({"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----vertexJSONkey"})
VERTEX_KEY = "-----BEGIN PRIVATE KEY-----vertexDICTkey"
ENV = {"AWS_SECRET": AWS_SECRET, "AWS_SESSION": AWS_SESSION, "AZURE_AD": AZURE_AD, "CLIENT_SECRET": CLIENT_SECRET,
       "VERTEX_JSON": VERTEX_JSON, "VERTEX_KEY": VERTEX_KEY}
SECRETS = [AWS_SECRET, AWS_SESSION, AZURE_AD, CLIENT_SECRET, VERTEX_JSON, VERTEX_KEY]

MODELS = [
    {"model_name": "claude", "litellm_params": {
        "model": "bedrock/anthropic.claude-3-haiku", "aws_access_key_id": "AKIAEXAMPLEKEYID",
        "aws_secret_access_key": "${AWS_SECRET}", "aws_session_token": "${AWS_SESSION}",
        "aws_region_name": "eu-central-1"}},
    {"model_name": "azure", "litellm_params": {
        "model": "azure/gpt-4o", "api_base": "https://acme.openai.azure.example", "api_version": "2024-06-01",
        "azure_ad_token": "${AZURE_AD}", "client_secret": "${CLIENT_SECRET}", "tenant_id": "tenant-0042"}},
    {"model_name": "gemini", "litellm_params": {
        "model": "vertex_ai/gemini-1.5-flash", "vertex_project": "acme-prod-project",
        "vertex_credentials": "${VERTEX_JSON}"}},
    {"model_name": "gemini-dict", "litellm_params": {
        "model": "vertex_ai/gemini-1.5-pro", "vertex_location": "europe-west4",
        "vertex_credentials": {"type": "service_account", "client_email": "bot@acme-prod.iam.example",
                               "private_key": "${VERTEX_KEY}",
                               "token_uri": "https://oauth2.googleapis.example/token"}}},
]


def test_a_models_provider_credentials_are_redacted_wherever_the_log_and_readyz_show_text(tmp_path, monkeypatch, capsys):
    from gateway.settings import load_settings

    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    settings = load_settings(write_config(tmp_path, models=MODELS))
    configure_logging_for(settings, level="WARNING", fmt="json")
    said = "; ".join(f"provider said: invalid credential {value!r}" for value in SECRETS)
    logging.getLogger("gateway.llm").warning("llm.call_failed %s", said)
    err = capsys.readouterr().err
    shown = redact(said)  # as /readyz shows a refused model's error, and `ingest-runs` a run's
    for secret in SECRETS:
        assert secret not in err and secret not in shown
    assert err.count("[REDACTED]") >= len(SECRETS)
    # What names no credential stays readable: the region, the project, the tenant, the key id, an https URL.
    kept = redact("eu-central-1 acme-prod-project tenant-0042 AKIAEXAMPLEKEYID https://oauth2.googleapis.example/token")
    assert "[REDACTED]" not in kept


@pytest.mark.usefixtures("fresh_fake")
async def test_a_providers_refusal_quoting_a_credential_is_redacted_in_readyz_and_the_log(tmp_path, fake, capfd):
    """Some providers' 401 repeats what it was sent; /readyz answers anyone."""
    fake.script("primary", Turn(status=401, error=f"invalid client secret {CLIENT_SECRET} for tenant tenant-0042"))
    models = [model_entry(fake, "primary", client_secret="${CLIENT_SECRET}")]
    bots = [{"name": "acme", "model": "primary", "channels": {"web": {}}, "sources": [docs_source(tmp_path)]}]
    async with app_client(tmp_path, bots=bots, models=models, env=ENV, ingest=True, llm={"num_retries": 0}) as client:
        await client.post("/v1/bots/acme/chat", json={"session_id": "cred-1", "text": "How much does the Plus plan cost?"})
        ready = await client.get("/readyz")
    refused = ready.json()["models"]["primary"]
    assert refused.startswith("error: AuthenticationError") and "tenant-0042" in refused, refused
    assert CLIENT_SECRET not in ready.text and "[REDACTED]" in refused
    assert CLIENT_SECRET not in capfd.readouterr().err


@pytest.mark.usefixtures("fresh_fake")
@pytest.mark.parametrize("pad", [60, 90], ids=["cut for readyz", "cut for the log"])
async def test_a_credential_a_providers_error_quotes_where_it_is_cut_short_shows_no_part_of_it(tmp_path, fake, capfd, pad):
    """/readyz keeps a refused model's error to 160 characters, and the log to 200: cut first, then redacted,
    a key quoted across the cut kept its first part, which no longer matched the key."""
    fake.script("primary", Turn(status=401, error="x" * pad + f" invalid client secret {CLIENT_SECRET}"))
    models = [model_entry(fake, "primary", client_secret="${CLIENT_SECRET}")]
    bots = [{"name": "acme", "model": "primary", "channels": {"web": {}}, "sources": [docs_source(tmp_path)]}]
    async with app_client(tmp_path, bots=bots, models=models, env=ENV, ingest=True, llm={"num_retries": 0}) as client:
        await client.post("/v1/bots/acme/chat", json={"session_id": "cut-1", "text": "How much does the Plus plan cost?"})
        ready = await client.get("/readyz")
    assert ready.json()["models"]["primary"].startswith("error: AuthenticationError")
    err = capfd.readouterr().err
    assert "llm.call_failed" in err
    assert CLIENT_SECRET[:8] not in ready.text and CLIENT_SECRET[:8] not in err


def test_a_bearer_header_and_a_key_inside_a_json_credential_are_each_a_secret_of_their_own():
    """`extra_headers: {Authorization: "Bearer KEY"}` was one secret, so KEY quoted alone showed; a
    `vertex_credentials` JSON string was one too, so its `private_key` quoted alone showed."""
    from gateway.url_secrets import credential_values

    params = {"model": "openai/gpt-4o", "extra_headers": {"Authorization": "Bearer sk-proxy-HEADERkey123",
                                                          "Accept": "application/json"},
              "vertex_credentials": VERTEX_JSON}
    found = credential_values(params)
    assert "sk-proxy-HEADERkey123" in found and "Bearer sk-proxy-HEADERkey123" in found
    assert "-----BEGIN PRIVATE KEY-----vertexJSONkey" in found and VERTEX_JSON in found
    assert "application/json" not in found


def test_the_password_of_a_models_api_base_is_a_secret_even_quoted_alone(tmp_path, monkeypatch, capsys):
    """A proxy's `api_base` may carry HTTP Basic credentials (`https://user:password@proxy/v1`), written out
    or read by LiteLLM from `os.environ/VAR`: a provider's error quoting the password alone showed it."""
    from gateway.settings import load_settings

    monkeypatch.setenv("PROXY_BASE", "https://gateway:PROXY-PASS-from-env@llm-proxy.example/v1?api-key=QUERY-KEY-77")
    models = [{"model_name": "proxied", "litellm_params": {
                  "model": "openai/gpt-4o", "api_base": "https://bot:PROXY-PASS-written@llm-proxy.example/v1"}},
              {"model_name": "proxied-env", "litellm_params": {
                  "model": "openai/gpt-4o", "api_base": "os.environ/PROXY_BASE"}}]
    settings = load_settings(write_config(tmp_path, models=models))
    configure_logging_for(settings, level="WARNING", fmt="json")
    secrets = ("PROXY-PASS-written", "PROXY-PASS-from-env", "QUERY-KEY-77")
    logging.getLogger("gateway.llm").warning("llm.call_failed %s", "; ".join(f"bad password {s}" for s in secrets))
    err = capsys.readouterr().err
    assert not any(secret in err for secret in secrets) and err.count("[REDACTED]") == len(secrets)
    assert "llm-proxy.example" in redact("https://llm-proxy.example/v1")  # the host stays readable


def test_a_provider_key_read_from_the_environment_is_a_secret_too(tmp_path, monkeypatch, capsys):
    """`embedding.model: litellm/…` (and a model without `api_key`) takes its key from LiteLLM's variables
    (OPENAI_API_KEY …): a 401 quoting the key ("Incorrect API key provided: sk-…") showed it whole on
    `gateway ingest`'s `!` line, in `gateway eval`'s error, the log and /readyz, since no config key named it."""
    from gateway.settings import load_settings

    monkeypatch.setenv("OPENAI_API_KEY", "sk-env-key-0123456789")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-secret-from-env")
    monkeypatch.setenv("LOG_FORMAT_NOTE", "production")  # not named like a credential: not redacted
    settings = load_settings(write_config(tmp_path, embedding={"model": "litellm/openai/text-embedding-3-small"}))
    configure_logging_for(settings, level="WARNING", fmt="json")
    said = redact("AuthenticationError: Incorrect API key provided: sk-env-key-0123456789 (aws-secret-from-env) "
                  "production")
    assert said == "AuthenticationError: Incorrect API key provided: [REDACTED] ([REDACTED]) production"


def test_a_placeholder_in_a_provider_variable_is_no_secret(tmp_path, monkeypatch):
    """A local server's placeholder key (`OPENAI_API_KEY=ollama`, as Ollama's guide writes it; `lm-studio`) is a
    word that names the model and server too: redacted, `ollama/llama3` read `[REDACTED]/llama3` in every log
    line, /readyz and CLI error. No provider issues a key that short; a real one still is redacted."""
    from gateway.settings import load_settings

    monkeypatch.setenv("OPENAI_API_KEY", "ollama")
    monkeypatch.setenv("LM_STUDIO_API_KEY", "lm-studio")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-api03-real-key-0123")
    settings = load_settings(write_config(tmp_path))
    configure_logging_for(settings, level="WARNING", fmt="json")
    said = "the model ollama/llama3 (lm-studio) failed: key sk-ant-api03-real-key-0123, served by ollama"
    assert redact(said) == "the model ollama/llama3 (lm-studio) failed: key [REDACTED], served by ollama"


@pytest.mark.parametrize("name", ["HF_TOKEN", "DATABRICKS_TOKEN", "WATSONX_APIKEY", "LANGFUSE_SECRET_KEY",
                                  "DB_PASSWORD", "SLACK_SIGNING_SECRET", "TWILIO_AUTH_TOKEN", "TOKEN", "SECRET_KEY",
                                  "GITHUB_APP_PRIVATE_KEY", "MINIO_SECRET_ACCESS_KEY", "azure_api_key"])
def test_a_credential_in_the_environment_named_as_providers_and_tools_name_them_is_redacted(
        tmp_path, monkeypatch, name):
    """LiteLLM and its callbacks read more than `*_API_KEY` (HF_TOKEN, DATABRICKS_TOKEN, WATSONX_APIKEY,
    LANGFUSE_SECRET_KEY), and a tool's or driver's error may quote a password from the environment: those were
    shown whole. Any variable whose name ends in a credential's word is read now, 16 characters and more."""
    from gateway.settings import load_settings

    monkeypatch.setenv(name, "  cred-0123456789abcdef\n")
    settings = load_settings(write_config(tmp_path))
    configure_logging_for(settings, level="WARNING", fmt="json")
    assert redact("401: bad credential cred-0123456789abcdef") == "401: bad credential [REDACTED]"


@pytest.mark.parametrize(("name", "value"), [
    ("HF_TOKEN", "hf_short"),  # under 16 characters: a placeholder
    ("MAX_TOKENS", "4096-tokens-at-most"), ("TOKENIZERS_PARALLELISM", "false-for-the-tests"),
    ("GITHUB_TOKEN_FILE", "/run/secrets/github-token"), ("LANGFUSE_PUBLIC_KEY", "pk-lf-public-0123456789"),
    ("GPG_KEY", "A035C8C19219BA821ECEA86B64E628F8D684696D"), ("SECRETARY_NAME", "ada-lovelace-the-first")])
def test_a_variable_that_only_looks_like_a_credential_is_left_readable(tmp_path, monkeypatch, name, value):
    """A count, a switch, a path to a secret file, a public key and a fingerprint are no credentials: redacted, each
    took its words out of every log line that named them (`/run/secrets/github-token` in a startup error)."""
    from gateway.settings import load_settings

    monkeypatch.setenv(name, value)
    settings = load_settings(write_config(tmp_path))
    configure_logging_for(settings, level="WARNING", fmt="json")
    assert redact(f"see {value}") == f"see {value}"


def test_the_database_and_redis_passwords_are_secrets_however_they_are_quoted(tmp_path, monkeypatch):
    """A password given in `database_url`'s query (`?password=`, `?sslpassword=` for the client key) or quoted
    apart from its URL (decoded: `p@ss…` written `p%40ss…`) by a driver's error was shown whole: only a
    `user:password@` in a URL was redacted."""
    from gateway.settings import load_settings

    url = "postgresql://app:p%40ss-w0rd-1234@127.0.0.1:9/db?sslpassword=client-key-pass-99"
    monkeypatch.setenv("REDIS_URL", "redis://:redis-pass-12345@127.0.0.1:9/1")  # as a deployment gives it
    settings = load_settings(write_config(tmp_path, database_url=url))
    configure_logging_for(settings, level="WARNING", fmt="json")
    said = redact("refused p@ss-w0rd-1234, p%40ss-w0rd-1234, client-key-pass-99, redis-pass-12345; "
                  "postgresql://app@h/db?password=client-key-pass-99")
    assert said == "refused [REDACTED], [REDACTED], [REDACTED], [REDACTED]; postgresql://app@h/db?password=[REDACTED]"


def test_a_development_database_password_leaves_the_words_it_is_readable(tmp_path, monkeypatch):
    """`postgres:postgres@` (or `password`) redacted as a secret would take "postgresql://" and "password
    authentication failed" out of every line: such a password is redacted only where a URL holds it."""
    from gateway.settings import load_settings

    url = "postgresql://postgres:postgres@127.0.0.1:9/db"
    monkeypatch.setenv("REDIS_URL", "redis://:password@127.0.0.1:9/1")
    configure_logging_for(load_settings(write_config(tmp_path, database_url=url)), level="WARNING", fmt="json")
    assert redact(f"{url}: password authentication failed") == \
        "postgresql://postgres:[REDACTED]@127.0.0.1:9/db: password authentication failed"
