"""WhatsApp through Twilio: signed form webhooks in, the Messages API out.

Inbound: Twilio posts `application/x-www-form-urlencoded` to `POST /webhooks/{bot}/whatsapp` and
signs it with `X-Twilio-Signature` over `public_url + /webhooks/{bot}/whatsapp` (from config, never
from the proxied request) plus the sorted form fields. The same URL receives status callbacks,
which become `StatusUpdate`s. Twilio sends no timestamp, so there is no staleness check; retries are
deduplicated by `MessageSid` while its message is stored, and for 30 days after `gateway forget` deleted it
(storage/forgotten.py; one replayed after the purge is stored again: README, Reliability and security, says why
that stays). Twilio signs the fields joined with no separator, so a captured request
can be re-cut (`MessageSid=SM1` + `NumMedia=0` → `MessageSid=SM1NumMedia0`) and still verify: the
copies of the message id Twilio sends (`SmsMessageSid`, `SmsSid`) must then agree, or it is refused.
Folding those copies into key names leaves one id, so an id that begins like Twilio's (`SM` or `MM`
and hex digits) must be Twilio's 34 characters: a re-cut id carries the next field along, or is cut short.

Outbound: the answer's Markdown becomes WhatsApp's light formatting (`*bold*`, `_italic_`,
`~strike~`, ```` ``` ```` code; links as "title (url)"), split at Twilio's 1,600 characters, counted in
UTF-16 units (an emoji counts twice, and a longer Body is refused with 21617). WhatsApp
is one-to-one through Twilio, so there are no groups, threads, edits or typing indicators here.

The 24-hour customer-service window: free-form text is only allowed within 24 h of the customer's
last message to that number (so to the bot). The adapter cannot see the database, so the outbox
(`gateway/delivery/outbox.py`) calls `within_window()` with the time of the customer's last message to the
bot and picks `send()`, `send_template()` (settings.content_sid), or reports the message undeliverable;
`WINDOW_MARGIN` keeps a reply computed in the window's last minutes from landing after it closes. `send()`
raises `RecipientUnreachable` for error 63016 (outside the window) and the other "cannot reach this person"
codes; 63016 mostly comes later, in a failed status callback, and `gateway/delivery/receipts.py` then queues
the reply again for the template.
"""

from __future__ import annotations

import asyncio
import collections
import json
import re
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import aiohttp
import structlog
from twilio.base.exceptions import TwilioRestException
from twilio.http.async_http_client import AsyncTwilioHttpClient
from twilio.request_validator import RequestValidator
from twilio.rest import Client

from channels import whatsapp_reconcile as reconcile
from channels.base import Capabilities, Deliver, ImmediateResponse, RawRequest, StatusUpdate, WebhookResult
from channels.citations import render_citations
from channels.render import split_text
from channels.sent_parts import SentParts
from channels.whatsapp_account import check_account, check_account_later
from channels.whatsapp_form import FormFields
from channels.whatsapp_http import HeaderAwareHttpClient
from channels.whatsapp_http import retry_after as _retry_after
from channels.whatsapp_media import attachments as media_of
from channels.whatsapp_media import missing as missing_media
from channels.whatsapp_media import readable
from channels.whatsapp_render import to_whatsapp
from gateway.background import cancel
from gateway.backoff import doubling
from gateway.errors import BadRequest, ChannelSendError, RecipientOptedOut, RecipientUnreachable, SignatureInvalid
from gateway.models import (
    HELP_ANSWERED,
    OPT_IN,
    OPT_IN_ANSWERED,
    OPT_OUT,
    OPT_OUT_ANSWERED,
    ConversationRef,
    InboundMessage,
    OutboundMessage,
    Sender,
    as_utc,
)
from gateway.settings import WhatsAppChannel

# A message's id as Twilio writes it: SM (text) or MM (media), then 32 hex digits. One that begins so
# (8 hex digits in) and is any other length was re-cut: lengthened by the next field, or cut short.
_SID = re.compile(r"(?:SM|MM)[0-9a-f]{32}")
_SID_START = re.compile(r"(?:SM|MM)[0-9a-f]{8}")


log = structlog.get_logger(__name__)

CHANNEL = "whatsapp"
MAX_LENGTH = 1600  # Twilio refuses a longer Body
WINDOW = timedelta(hours=24)
WINDOW_MARGIN = timedelta(minutes=10)
"""Free-form text stops this long before the window closes: the send is queued at Twilio and reaches
WhatsApp a little later, which judges it by when it arrives."""
OUTSIDE_WINDOW = 63016
# Codes meaning "this person cannot be reached right now", not "try again": outside the window,
# opted out (STOP), invalid or unknown WhatsApp address, not a WhatsApp user.
OPTED_OUT_CODE = 21610  # "Attempt to send to unsubscribed recipient"
UNREACHABLE_CODES = frozenset({OUTSIDE_WINDOW, 21211, OPTED_OUT_CODE, 21614, 63003, 63024})
EMPTY_TWIML = ImmediateResponse(status=200, body=b'<?xml version="1.0" encoding="UTF-8"?><Response/>',
                                content_type="text/xml")
"""The acknowledgement: TwiML that tells Twilio to send nothing back (the answer comes later, by the API)."""
_STATUSES = {"sent": "sent", "delivered": "delivered", "read": "read", "failed": "failed",
             "undelivered": "failed", "canceled": "failed"}

# Twilio's opt-out keywords, and `OptOutType` (STOP, START, HELP), which Twilio adds when Advanced Opt-Out
# manages the sender's keywords (and has then answered the message itself, HELP included). Without it Twilio
# neither answered nor blocked anything (its default STOP filtering is SMS's, not WhatsApp's): the gateway
# confirms. From the Body alone only the unmistakable words count: "yes", "cancel" or "end" typed to a support
# bot are answers.
_KEYWORDS = {"stop": OPT_OUT, "stopall": OPT_OUT, "unsubscribe": OPT_OUT, "optout": OPT_OUT,
             "start": OPT_IN, "unstop": OPT_IN, "help": "help"}
_OPT_OUT_TYPES = {"STOP": OPT_OUT_ANSWERED, "START": OPT_IN_ANSWERED, "HELP": HELP_ANSWERED}

def within_window(last_inbound_at: datetime | None, now: datetime) -> bool:
    """Whether free-form messages are allowed: the customer wrote within the last 24 hours.

    Naive datetimes are taken as UTC (SQLite returns them naive).
    """
    if last_inbound_at is None:
        return False
    return timedelta(0) <= as_utc(now) - as_utc(last_inbound_at) < WINDOW - WINDOW_MARGIN


class WhatsAppAdapter:
    """The WhatsApp channel, through Twilio's Messages API."""

    name = CHANNEL
    capabilities = Capabilities(max_length=MAX_LENGTH, markdown="plain", length_unit="utf16", delivery_receipts=True)

    def __init__(
        self,
        bot: str,
        settings: WhatsAppChannel,
        *,
        http: Any | None = None,
        max_attempts: int = 3,
        backoff: float = 0.5,
        max_wait: float = 30.0,
        identity_retry_s: float = 5.0,
    ) -> None:
        self.bot = bot
        self.identity_retry_s = identity_retry_s  # the first wait before fetching the account again; doubles
        self._account_check: asyncio.Task | None = None
        self.settings = settings
        self.webhook_url = settings.public_url.rstrip("/") + f"/webhooks/{bot}/whatsapp"
        self._validator = RequestValidator(settings.auth_token)
        self._http = http
        self._client: Client | None = None
        self.max_attempts = max_attempts
        self.backoff = backoff
        self.max_wait = max_wait
        self._from = settings.from_number.removeprefix("whatsapp:")
        # Parts already delivered of a reply whose send failed later, by reply: a retry resumes after them.
        self._sent_parts = SentParts()
        self._given_sids: collections.deque[str] = collections.deque(maxlen=reconcile.GIVEN_SIDS_KEPT)

    # -- inbound ----------------------------------------------------------------------------

    def verify(self, request: RawRequest) -> None:
        """Check `X-Twilio-Signature` against the configured public URL; raise `SignatureInvalid`."""
        signature = request.header("x-twilio-signature")
        if not signature:
            raise SignatureInvalid("missing X-Twilio-Signature")
        query = urlsplit(request.url).query
        url = f"{self.webhook_url}?{query}" if query else self.webhook_url
        try:
            params = FormFields(parse_qsl(request.body.decode("utf-8"), keep_blank_values=True))
        except UnicodeDecodeError:
            raise SignatureInvalid("body is not UTF-8 form data") from None
        if not self._validator.validate(url, params, signature):
            # Most often public_url is not the URL Twilio posts to (http, a proxy's path prefix): say which was used.
            raise SignatureInvalid(f"X-Twilio-Signature does not match (checked against {self.webhook_url}: "
                                   "whatsapp.public_url must be the base URL Twilio posts to, and auth_token the "
                                   "account's)")

    def parse(self, request: RawRequest) -> WebhookResult:
        """Turn a verified webhook (inbound message or status callback) into a `WebhookResult`."""
        try:
            pairs = parse_qsl(request.body.decode("utf-8"), keep_blank_values=True, strict_parsing=False)
        except UnicodeDecodeError:
            raise BadRequest("body is not UTF-8 form data") from None
        # NUL bytes are legal in form data but not in PostgreSQL text; strip them everywhere.
        result = self.parse_form({k.replace("\x00", ""): v.replace("\x00", "") for k, v in pairs})
        # Twilio reads the answer as TwiML: anything else is logged as error 12300 in its debugger.
        return replace(result, response=EMPTY_TWIML) if result.response is None else result

    def parse_form(self, form: Mapping[str, str]) -> WebhookResult:
        """Parse already-decoded Twilio form fields (also used for the JSON fixtures in tests)."""
        sid = form.get("MessageSid") or form.get("SmsMessageSid") or form.get("SmsSid")
        if not sid:
            raise BadRequest("Twilio webhook without MessageSid")
        copies = {form[k] for k in ("MessageSid", "SmsMessageSid", "SmsSid") if form.get(k)}
        if len(copies) > 1:
            # A re-cut replay of a signed request (module docstring), never something Twilio sends.
            raise BadRequest("Twilio webhook whose MessageSid, SmsMessageSid and SmsSid differ")
        if _SID_START.match(sid) and not _SID.fullmatch(sid):
            # The other copies folded into key names, and the id carries the next field along ("SM…NumMedia0")
            # or gave its last digits to the next key.
            raise BadRequest("Twilio webhook whose MessageSid is not Twilio's 34 characters")
        if "MessageStatus" in form and form.get("SmsStatus") != "received":
            return self._status(sid, form)
        sender = form.get("From", "")
        if not sender:
            raise BadRequest("Twilio webhook without From")
        if sender.removeprefix("whatsapp:") == self._from:
            return WebhookResult(ignored=(f"own message {sid} echoed back",))
        body = form.get("Body", "")
        attachments = media_of(form)
        if unfetched := missing_media(attachments):  # answered as media the bot cannot read
            log.warning("whatsapp.media_missing", bot=self.bot, sid=sid, missing=unfetched, num_media=form.get("NumMedia"))
        if "Body" not in form and not attachments:
            # Twilio sends a Body with every message, empty or not. A blank one is a message: it gets the
            # greeting, as a bare mention does on the other channels.
            return WebhookResult(ignored=(f"message {sid} has no Body field and no media",))
        # A shared location or contact card is something said: a line of text the pipeline answers and
        # operators read ("I can only read text" answered it), its values in `meta.shared`; so is the ad
        # a first message came from ("more information about this?").
        text, shared = readable(form, body, attachments)
        message = InboundMessage(
            channel=CHANNEL,
            external_id=sid,
            # Twilio WhatsApp is one-to-one: the chat is the customer's address as Twilio wrote it
            # (with or without `whatsapp:`), so a reply goes back the same way.
            conversation=ConversationRef(channel=CHANNEL, workspace=form.get("To", ""), chat=sender),
            sender=Sender(
                external_id=_contact_id(form.get("WaId", ""), sender),
                display_name=form.get("ProfileName", ""),
            ),
            text=text,
            attachments=attachments,
            reply_to=form.get("OriginalRepliedMessageSid") or None,
            raw=dict(form) | _keyword(form, body) | ({"shared": shared} if shared else {}),
        )
        return WebhookResult(messages=(message,))

    def _status(self, sid: str, form: Mapping[str, str]) -> WebhookResult:
        raw_status = form.get("MessageStatus", "")
        status = _STATUSES.get(raw_status)
        if status is None:
            return WebhookResult(ignored=(f"status {raw_status!r} for {sid} is not tracked",))
        update = StatusUpdate(provider_message_id=sid, status=status, error_code=form.get("ErrorCode") or None)  # type: ignore[arg-type]
        return WebhookResult(status_updates=(update,))

    # -- outbound ---------------------------------------------------------------------------

    async def send(self, message: OutboundMessage) -> list[str]:
        """Render, split at 1,600 UTF-16 units and send; return the Twilio message SIDs in order.

        On failure raises `ChannelSendError` or `RecipientUnreachable`; its `sent_ids` attribute lists
        the parts that did go through. The adapter also remembers them, so sending the same message
        again resumes after them instead of repeating them; in a new process, whose memory is empty,
        the outbox hands them back in `message.delivered_parts`.
        """
        text = to_whatsapp(message.text)
        footer = render_citations(message.citations, style="plain", heading=message.sources_heading)
        if footer:
            text = f"{text}\n\n{footer}" if text.strip() else footer
        parts = split_text(text, limit=MAX_LENGTH, unit="utf16")
        with self._sent_parts.resume(message) as sent:
            for index, part in enumerate(parts):
                if index < len(sent):
                    continue  # delivered by an earlier attempt of this same reply
                await sent.add(await self._create(to=message.conversation.chat, body=part), more=index + 1 < len(parts))
                log.info("whatsapp.sent", bot=self.bot, chat=message.conversation.chat, sid=sent[-1], part=index + 1)
        return sent

    async def send_template(
        self, conversation: ConversationRef, *, content_sid: str, variables: Mapping[str, str] | None = None
    ) -> list[str]:
        """Send an approved Content template: the only way to reach a customer outside the window."""
        content = json.dumps({str(k): str(v) for k, v in (variables or {}).items()})
        sid = await self._create(to=conversation.chat, content_sid=content_sid, content_variables=content)
        return [sid]

    async def send_typing(self, conversation: ConversationRef) -> None:
        """No-op: Twilio's Messages API has no typing indicator for WhatsApp."""

    async def start(self, deliver: Deliver) -> None:
        """Check the credentials (channels/whatsapp_account.py); Twilio only calls the webhook otherwise."""
        where = {"bot": self.bot, "account_sid": self.settings.account_sid,
                 "api_base": self.settings.api_base or "https://api.twilio.com"}
        if self._account_check is None and not await check_account(self._rest(), failures=0, **where):
            self._account_check = asyncio.create_task(
                check_account_later(self._rest, first_s=self.identity_retry_s, **where), name=f"twilio-account-{self.bot}")

    async def stop(self) -> None:
        """Stop asking for the account, close the HTTP session."""
        if self._account_check is not None:
            await cancel([self._account_check])
            self._account_check = None
        if self._client is not None and isinstance(self._client.http_client, AsyncTwilioHttpClient):
            await self._client.http_client.close()
        self._client = None

    def _rest(self) -> Client:
        # Built lazily, inside the running loop: aiohttp sessions belong to the loop that made them.
        if self._client is None:
            http = self._http or HeaderAwareHttpClient()
            client = Client(self.settings.account_sid, self.settings.auth_token, http_client=http, environment={})
            if self.settings.api_base:
                client.api.base_url = self.settings.api_base.rstrip("/")
            self._client = client
        return self._client

    async def _create(self, *, to: str, **fields: str) -> str:
        """One Messages.create with bounded retries for 429/503, which Twilio did not process."""
        sender = f"whatsapp:{self._from}" if to.startswith("whatsapp:") else self._from
        params: dict[str, Any] = {"to": to, "from_": sender, **fields}
        if self.settings.public_url:
            params["status_callback"] = self.webhook_url
        for attempt in range(1, self.max_attempts + 1):
            _retry_after.set(None)
            began = datetime.now(timezone.utc)
            try:
                created = await self._rest().messages.create_async(**params)
                self._given_sids.append(str(created.sid))
                return str(created.sid)
            except TwilioRestException as exc:
                # A 500/502/504 may come after Twilio created the message: resending would send it twice.
                if exc.status >= 500 and exc.status != 503 and (sid := await self._reconcile(params, began)):
                    return sid
                wait = self._retry_wait(exc, attempt)
                if wait is None:
                    raise _translate(exc) from exc
            except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as exc:
                # The connection never opened (refused, or not open by whatsapp_http.REQUEST_TIMEOUT_S), so nothing was sent: safe to retry.
                wait = doubling(attempt, first=self.backoff)
                if attempt == self.max_attempts:
                    raise ChannelSendError(f"Twilio unreachable: {exc}") from exc
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                # The request may have been processed. Found in Twilio's list, it was; not found, it may
                # still be: retrying (here or in the outbox) could send it twice, so the outcome is
                # reported as unknown and never resent.
                if sid := await self._reconcile(params, began):
                    return sid
                raise ChannelSendError(f"Twilio request failed, outcome unknown: {exc!r}", permanent=True) from exc
            log.warning("whatsapp.send_retry", bot=self.bot, chat=to, attempt=attempt, wait=wait)
            await asyncio.sleep(wait)
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    async def _reconcile(self, params: dict[str, Any], began: datetime) -> str | None:
        """The SID Twilio gave this create call's message, when its list shows one (`whatsapp_reconcile`)."""
        sid = await reconcile.lookup(self._rest(), params, began, bot=self.bot, given=self._given_sids)
        if sid is not None:
            self._given_sids.append(sid)
        return sid

    def _retry_wait(self, exc: TwilioRestException, attempt: int) -> float | None:
        """Seconds to wait before retrying, or None when this error must not be retried here."""
        if exc.status not in (429, 503) or attempt >= self.max_attempts:
            return None
        wait = _retry_after.get()
        wait = doubling(attempt, first=self.backoff) if wait is None else wait
        return wait if wait <= self.max_wait else None


def _translate(exc: TwilioRestException) -> ChannelSendError | RecipientUnreachable:
    """Twilio's error into the gateway's tree, at the boundary."""
    if exc.code == OPTED_OUT_CODE:  # a STOP we never saw (sent before the bot, or answered by Twilio only)
        return RecipientOptedOut(f"Twilio {exc.code}: {exc.msg}")
    if exc.code in UNREACHABLE_CODES:
        return RecipientUnreachable(f"Twilio {exc.code}: {exc.msg}")
    retry_after = _retry_after.get()
    if exc.status == 429 and retry_after is None:
        retry_after = 1.0
    transient = exc.status == 429 or exc.status >= 500
    return ChannelSendError(f"Twilio {exc.status} ({exc.code}): {exc.msg}", retry_after=retry_after,
                            permanent=not transient, rate_limited=exc.status == 429)


def _keyword(form: Mapping[str, str], text: str) -> dict[str, str]:
    """`{"command": …}` for a keyword message (`opt_out`, `opt_in`, `help`, or with `_answered` when `OptOutType`
    says Twilio's Advanced Opt-Out answered it), else `{}`.

    The store marks the contact opted out (or in) so no later reply is sent to someone who said STOP. One
    Twilio answered gets nothing more from the pipeline; a bare STOP or START gets the bot's confirmation
    (`replies.opted_out`, `replies.opted_in`), and HELP the greeting."""
    command = _OPT_OUT_TYPES.get(form.get("OptOutType", "").upper()) or _KEYWORDS.get(text.strip().strip(".!").lower())
    return {"command": command} if command else {}


def _contact_id(wa_id: str, sender: str) -> str:
    """The customer as one id, Twilio's `WaId` (`14155550123`), also when only `From`
    (`whatsapp:+14155550123`) came: the two gave one person two ids, and a tool two customers. The
    WaId form is the one Twilio sends for WhatsApp, so contacts stored before keep their id."""
    if wa_id.isdigit():
        return wa_id
    address = sender.removeprefix("whatsapp:")
    return address[1:] if address.startswith("+") and address[1:].isdigit() else address
