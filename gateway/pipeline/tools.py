"""Tools the model may call, declared per bot, and authorized in code.

Every `python` tool receives the conversation's verified `CallerIdentity` from the gateway as its first
argument; the model only supplies the other arguments, so it cannot choose whose data it reads. An
`http` tool gets no identity: it is for data every customer may see.

Kinds:
- `builtin`: `escalate_to_human(reason)` hands the conversation to a person.
- `python`: an async or sync callable `module:function(identity, **arguments)`. To tell the model why
  a call failed, raise `ToolError("...")`: its message is the model's to read. Any other exception
  shows the model only its type; its text (a query, a path, a connection string) goes to the log.
- `http`: a request to a URL template filled with the arguments; headers may use `${ENV}`. An argument
  can only fill its own path segment (`..` included; an empty one is refused), and an error names the status, never the URL
  (its query may hold an API key). Its answer is read up to `MAX_RESPONSE_BYTES` (`gateway.capped_body`).
  A redirect is not followed, and a host that resolved to this machine or the cloud's metadata service is not
  called unless the URL names such an address itself (`rag.crawl_bounds.guarded_client`).

A call of a python or an http tool with an argument its schema does not declare (`parameters`, else a
python tool module's `PARAMETERS`) is refused without running it, so only declared parameters are sent.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import importlib
import inspect
import json
import os
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx
import structlog

from gateway.bot_settings import ESCALATE_TOOL, path_fields, url_fields, url_origin
from gateway.capped_body import BodyTooLarge, read_capped
from gateway.errors import ConfigError
from gateway.models import CallerIdentity
from gateway.pipeline.tool_arguments import argument_problem
from gateway.settings import BotSettings, Settings, ToolSettings
from gateway.url_secrets import url_credentials
from rag.crawl_bounds import guarded_client

_ESCALATE_SCHEMA = {
    "type": "object",
    "properties": {"reason": {"type": "string", "description": "Why a person is needed, in one sentence."}},
    "required": ["reason"],
}
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
DEFAULT_RESULT_CHARS = ToolSettings.model_fields["max_result_chars"].default
MIN_SECRET_CHARS = 6  # shorter values would redact ordinary words out of every log line
log = structlog.get_logger("gateway.tools")


IDEMPOTENCY_HEADER = "Idempotency-Key"
MAX_RESPONSE_BYTES = 4 << 20  # of an http tool's answer, decoded: past it the call is "response too large"
_READ_ONLY_METHODS = ("GET", "HEAD")  # change nothing: no idempotency key sent, and read afresh when asked again
_CALL_KEY: contextvars.ContextVar[str | None] = contextvars.ContextVar("tool_call_key", default=None)


def idempotency_key() -> str | None:
    """For a `python` tool: the key of the call running now, the same in every attempt at the message
    (gateway/pipeline/tool_journal.py). Pass it to an API that dedupes on it, or dedupe on it yourself,
    so that a call the gateway died during and made again does not act twice. None outside a message."""
    return _CALL_KEY.get()


class ToolError(Exception):
    """Raised by a `python` tool for a failure the model should hear about, in words meant for it
    ("that order was cancelled, it cannot be changed")."""


class _OffLimitsAddress(ToolError):
    """An http tool's host, named by no internal address, resolved to this machine or the metadata service."""

    def __init__(self, host: str, address: str) -> None:
        super().__init__("refused: the service's name resolved to an address of this machine or of the cloud's "
                         "metadata service; nothing was sent")
        self.host, self.address = host, address


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """The result of one call, as stored with the turn and shown to the model."""

    name: str
    arguments: dict[str, Any]
    result: Any
    error: str | None = None
    escalate: str | None = None
    replayed: bool = False  # an earlier attempt at the same message ran it (gateway/pipeline/tool_journal.py)
    repeated: bool = False  # the same call earlier in the turn ran, and this one was given its outcome


class BotTools:
    """The tools one bot allows, ready to describe to the model and to call."""

    def __init__(self, bot: BotSettings) -> None:
        self.bot = bot
        # With escalation off there is nobody to hand over to: the model is not offered the tool.
        self._specs = {t.name: t for t in bot.tools
                       if bot.escalation.enabled or not (t.type == "builtin" and t.name == ESCALATE_TOOL)}
        self._callables: dict[str, Any] = {}
        for spec in bot.tools:
            if spec.type == "python":
                self._callables[spec.name] = _import(spec, bot.name)
        self._declarations = [self._declaration(spec) for spec in self._specs.values()]
        # The declared parameters of each tool: a call may pass these and no others.
        self._parameters = {d["function"]["name"]: d["function"]["parameters"] for d in self._declarations}
        for spec in bot.tools:
            if spec.type == "python":
                _check_signature(spec, bot.name, self._callables[spec.name], self._parameters.get(spec.name, {}))

    def result_limit(self, name: str) -> int:
        """How many characters of a call's result (as JSON) the model and the stored turn get."""
        spec = self._specs.get(name)
        return spec.max_result_chars if spec is not None else DEFAULT_RESULT_CHARS

    def reads_only(self, name: str) -> bool:
        """Whether a call of `name` changes nothing (an http GET). What a python tool does is not known."""
        spec = self._specs.get(name)
        return spec is not None and spec.type == "http" and spec.method.upper() in _READ_ONLY_METHODS

    def schemas(self) -> list[dict[str, Any]]:
        """OpenAI-style function declarations for exactly the tools this bot allows (built once: the
        config and the tools' modules do not change while the process runs)."""
        return self._declarations

    def _declaration(self, spec: ToolSettings) -> dict[str, Any]:
        if spec.type == "builtin" and spec.name == ESCALATE_TOOL:
            description = spec.description or "Hand the conversation to a human operator."
            parameters = _ESCALATE_SCHEMA
        else:
            fn = self._callables.get(spec.name)
            module = inspect.getmodule(fn) if fn else None
            description = spec.description or getattr(module, "DESCRIPTION", "") or (fn.__doc__ or "").strip()
            parameters = spec.parameters
            # The config's schema, else the module's `PARAMETERS` when the config declares none.
            if parameters == {"type": "object", "properties": {}} and module is not None:
                parameters = getattr(module, "PARAMETERS", parameters)
        return {"type": "function", "function": {"name": spec.name, "description": description,
                                                 "parameters": parameters}}

    async def call(self, name: str, raw_arguments: str | dict[str, Any], *, identity: CallerIdentity,
                   key: str | None = None) -> ToolOutcome:
        """Run one tool call. Never raises: errors and timeouts become the tool's result. `key` is the
        call's idempotency key (`idempotency_key()`, and the `Idempotency-Key` header of an http tool)."""
        token = _CALL_KEY.set(key)
        try:
            return await self._call(name, raw_arguments, identity=identity)
        finally:
            _CALL_KEY.reset(token)

    async def _call(self, name: str, raw_arguments: str | dict[str, Any], *, identity: CallerIdentity) -> ToolOutcome:
        try:
            arguments = json.loads(raw_arguments or "{}") if isinstance(raw_arguments, str) else dict(raw_arguments)
            if not isinstance(arguments, dict):
                raise ValueError("arguments must be a JSON object")
        except (ValueError, TypeError) as exc:
            return ToolOutcome(name, {}, None, error=f"invalid arguments: {exc}")
        except RecursionError:  # json.loads gives up past ~1,000 levels; it failed the whole turn
            return ToolOutcome(name, {}, None, error="invalid arguments: nested too deeply")
        spec = self._specs.get(name)
        if spec is None:  # the model named a tool this bot does not allow
            return ToolOutcome(name, arguments, None, error=f"unknown tool {name!r}")
        if spec.type == "builtin" and name == ESCALATE_TOOL:
            reason = str(arguments.get("reason") or "the assistant asked for a person")[:500]
            return ToolOutcome(name, arguments, {"status": "escalated"}, escalate=reason)
        # Only what the model was told it may pass: an invented `include_all=True` must not reach a
        # parameter a python tool keeps for its own code, nor an invented `city` an http tool's URL.
        declared = self._parameters[name].get("properties")
        if undeclared := sorted(set(arguments) - set(declared if isinstance(declared, dict) else ())):
            return ToolOutcome(name, arguments, None, error=f"invalid arguments: {', '.join(map(repr, undeclared))} "
                                                            f"{'is not a parameter' if len(undeclared) == 1 else 'are not parameters'} of this tool")
        if problem := argument_problem(arguments, self._parameters[name]):
            return ToolOutcome(name, arguments, None, error=f"invalid arguments: {problem}")
        if spec.type == "python" and (mismatch := _signature_mismatch(self._callables[name], identity, arguments)):
            return ToolOutcome(name, arguments, None, error=f"invalid arguments: {mismatch}")
        if spec.type == "http" and (missing := [f for f in url_fields(spec.url) if arguments.get(f) is None]):
            # The URL cannot be made without them (it was a KeyError, logged as the tool failing).
            return ToolOutcome(name, arguments, None, error="invalid arguments: missing "
                                                            f"{', '.join(map(repr, dict.fromkeys(missing)))}")
        if spec.type == "http" and (empty := [f for f in path_fields(spec.url) if str(arguments[f]) == ""]):
            # An empty segment is no segment: /orders/{id} became /orders/ (every order, with the tool's key).
            return ToolOutcome(name, arguments, None, error=f"invalid arguments: {', '.join(map(repr, dict.fromkeys(empty)))} "
                                                            f"{'is' if len(set(empty)) == 1 else 'are'} empty")
        try:
            async with asyncio.timeout(spec.timeout):
                if spec.type == "python":
                    result = await _invoke(self._callables[name], identity, arguments)
                else:
                    result = await self._http_call(spec, arguments)
        except TimeoutError:
            return ToolOutcome(name, arguments, None, error=f"tool timed out after {spec.timeout:g}s")
        except httpx.HTTPStatusError as exc:  # its text holds the URL, and the URL may hold a key
            return ToolOutcome(name, arguments, None, error=f"the service answered HTTP {exc.response.status_code}")
        except httpx.HTTPError as exc:
            return ToolOutcome(name, arguments, None, error=f"{type(exc).__name__}: the service could not be reached")
        except ToolError as exc:
            return ToolOutcome(name, arguments, None, error=str(exc)[:500] or "the tool failed")
        except Exception as exc:  # a tool's failure is data for the model, not a crash
            # Its text may hold a query or a connection string: the log gets it, the model and the stored
            # turn (which operators read) only its type.
            log.warning("tool.failed", tool=name, bot=self.bot.name, error=f"{type(exc).__name__}: {exc}"[:500],
                        exc_info=exc)
            return ToolOutcome(name, arguments, None, error=f"{type(exc).__name__}: the tool failed")
        return ToolOutcome(name, arguments, result)

    async def _http_call(self, spec: ToolSettings, arguments: dict[str, Any]) -> Any:
        url = spec.url.format(**{k: _path_segment(v) for k, v in arguments.items()})
        if _origin(url) != _origin(url_origin(spec.url)):
            # Refused at load (`_check_url_template`); checked again here, as the arguments are the model's.
            log.warning("tool.other_host", tool=spec.name, bot=self.bot.name)
            raise ToolError("refused: the arguments would send this call to another server")
        headers = {k: _ENV_REF.sub(lambda m: os.environ.get(m.group(1), ""), v) for k, v in spec.headers.items()}
        key = _CALL_KEY.get()
        if key and spec.method.upper() not in _READ_ONLY_METHODS and \
                IDEMPOTENCY_HEADER.lower() not in {h.lower() for h in headers}:
            # A request that changes something: an API that dedupes on the key acts once, though the
            # gateway died during the call and made it again.
            headers[IDEMPOTENCY_HEADER] = key
        # Only declared parameters reach here (`_call`): an extra `"role": "admin"` is refused as the model's invention.
        body = dict(arguments)
        # Not the model's choice (the host is the config's), but the host's DNS may answer 127.0.0.1 or
        # 169.254.169.254: refused before a byte is sent, unless the config names such an address itself.
        # Made here, never passed in: a client given from outside (BotTools took one) checked no address.
        client = guarded_client(_OffLimitsAddress, timeout=spec.timeout)
        try:
            if spec.method.upper() in ("GET", "DELETE"):
                # What the URL's path does not take goes in its query string; it was not sent at all.
                in_path = set(url_fields(spec.url))
                query = {k: v if isinstance(v, (str, int, float)) else json.dumps(v)
                         for k, v in body.items() if k not in in_path and v is not None}
                # Merged into the configured query (`?apikey=…`), which httpx's `params=` would replace.
                target = httpx.URL(url).copy_merge_params(query) if query else url
                request = client.build_request(spec.method.upper(), target, headers=headers)
            else:
                request = client.build_request(spec.method.upper(), url, headers=headers, json=body)
            try:  # redirects are not followed (the client's default): a 3xx is the service's answer
                response = await client.send(request, stream=True)
            except _OffLimitsAddress as exc:
                log.warning("tool.internal_address", tool=spec.name, bot=self.bot.name, host=exc.host,
                            address=exc.address)
                raise
            try:
                response.raise_for_status()
                content = await read_capped(response, MAX_RESPONSE_BYTES)
            except BodyTooLarge as exc:
                # Read whole, an API's answer (or a few hundred bytes gzipped twice) took all the server's
                # memory before `max_result_chars` cut it: the model is told, and the turn goes on.
                log.warning("tool.response_too_large", tool=spec.name, bot=self.bot.name, problem=str(exc))
                raise ToolError(f"response too large: the service's answer {exc}; not read") from None
            finally:
                await response.aclose()
        finally:
            await client.aclose()
        try:
            return json.loads(content)
        except ValueError:  # text: bounded by the tool's `max_result_chars`, and the cut marked, as JSON is
            return content.decode(response.encoding or "utf-8", errors="replace")


def _origin(url: str) -> tuple[str, str, int | None]:
    """Where a request to `url` goes: scheme, host and port, as httpx reads them."""
    parsed = httpx.URL(url)
    return parsed.scheme, parsed.host, parsed.port


def _path_segment(value: Any) -> str:
    """An argument as one URL segment: `/`, `?`, `#` percent-encoded, and a bare `.` or `..` too,
    which would otherwise climb the configured path (httpx removes dot segments)."""
    text = quote(str(value), safe="")
    return text.replace(".", "%2E") if text.strip(".") == "" else text


PLAIN_HEADERS = frozenset({"accept", "accept-charset", "accept-encoding", "accept-language", "cache-control",
                           "content-language", "content-type", "user-agent"})
"""Headers that name what is sent or wanted, never who asks: their values are no secrets. Any other
header's is one (a custom `X-Shop-Token` is no name a rule could know)."""


def http_tool_secrets(settings: Settings) -> list[str]:
    """Values of http tools' config that are secrets in all but name, for log redaction: header
    values but `PLAIN_HEADERS`' (and their credential after `Bearer`), query values named like a key or a
    token, and the URL's userinfo (`https://sk_live_…:@api/…`)."""
    found: list[str] = []
    for bot in settings.bots:
        for spec in bot.tools:
            if spec.type != "http":
                continue
            for name, value in spec.headers.items():
                if name.lower() not in PLAIN_HEADERS:
                    found += [value, value.split()[-1]] if value.split() else []
            found += url_credentials(spec.url or "")  # the query's (decoded and as written) and the userinfo's
    return sorted({v for v in found if len(v) >= MIN_SECRET_CHARS})


SYNC_TOOL_THREADS = 8
# Plain-function tools run on threads of their own. A thread cannot be stopped, so one that outlives its
# timeout keeps its thread; on asyncio's default pool (6 threads on 2 cores) six of them stalled query
# embedding and every model call, for every bot. Here they can only hold up other sync tools.
_SYNC_TOOLS = concurrent.futures.ThreadPoolExecutor(max_workers=SYNC_TOOL_THREADS, thread_name_prefix="tool")


def _signature_mismatch(fn: Any, identity: CallerIdentity, arguments: dict[str, Any]) -> str | None:
    """Why the model's arguments cannot be passed to `fn` (a missing or unexpected one), or None.

    The signature of `fn` itself, not of what it wraps: a decorator may supply an argument on its own."""
    try:
        inspect.signature(fn, follow_wrapped=False).bind(identity, **arguments)
    except TypeError as exc:
        return str(exc)
    except Exception:  # no signature to read (a builtin): let the call itself decide
        return None
    return None


def _check_signature(spec: ToolSettings, bot: str, fn: Any, parameters: dict[str, Any]) -> None:
    """A function that cannot be called as `fn(identity, **declared parameters)` is a config error: it
    failed every call, as `invalid arguments: multiple values for argument 'city'` for a `def f(city)`."""
    declared = parameters.get("properties")
    placeholder = CallerIdentity(bot=bot, channel="web", contact_external_id="")
    if mismatch := _signature_mismatch(fn, placeholder, dict.fromkeys(declared if isinstance(declared, dict) else ())):
        raise ConfigError(f"bots.{bot}.tools.{spec.name}.import_path",
                          f"{spec.import_path} cannot be called as {spec.import_path.partition(':')[2]}(identity, "
                          f"**arguments) with its declared parameters ({mismatch}); a python tool's first parameter "
                          "receives the caller's identity, the others are the names in `parameters`' properties")


async def _invoke(fn: Any, identity: CallerIdentity, arguments: dict[str, Any]) -> Any:
    if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(type(fn), "__call__", None)):
        return await fn(identity, **arguments)
    call = functools.partial(contextvars.copy_context().run, fn, identity, **arguments)
    return await asyncio.get_running_loop().run_in_executor(_SYNC_TOOLS, call)


def _import(spec: ToolSettings, bot: str) -> Any:
    if not spec.import_path or ":" not in spec.import_path:
        raise ConfigError(f"bots.{bot}.tools.{spec.name}.import_path", "write it as 'package.module:function'")
    module_name, _, attr = spec.import_path.partition(":")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        # The README's own example fails so until its folder is on the path: say where Python looked.
        hint = (f"; put the folder that holds {module_name.partition('.')[0]!r} on PYTHONPATH (README: Tools)"
                if isinstance(exc, ModuleNotFoundError) else "")
        raise ConfigError(f"bots.{bot}.tools.{spec.name}.import_path",
                          f"cannot import {spec.import_path}: {exc}{hint}") from None
