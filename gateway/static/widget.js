/* The web chat widget: plain JS, no build step, no external resources.
 *
 * Talks to the contract API:
 *   GET  /v1/bots                                        which bots exist (a picker when more than one)
 *   POST /v1/bots/{bot}/chat  {session_id, text}         SSE (token… then done | error), JSON as fallback
 *   GET  /v1/bots/{bot}/sessions/{session}/messages?after=ID   the transcript, polled for operator replies
 *
 * Safety rules: every text that came from a model, an operator or a document is put in the page with
 * textContent or as text nodes (never innerHTML). Replies are Markdown, rendered by widget-render.js
 * (loaded first): a small subset becomes DOM nodes, everything else stays text, and a link is made only
 * when its URL parses as http(s).
 *
 * Its parts, loaded before it: widget-transport.js (the requests, SSE), widget-transcript.js (messages
 * drawn and placed, the answer awaited), widget-send.js (sending, and a message not sent).
 */
(function () {
  "use strict";

  var API = "/v1/bots";
  var POLL_MS = 3000;
  // A transcript read that has not answered in this long is given up (a half-open connection after a network
  // change hung it, and the next poll waited on it for ever: no answer appeared until a reload).
  var POLL_TIMEOUT_MS = 10000;
  var POLL_BACKOFF_MAX_MS = 30000;  // polls that fail (offline, 5xx) wait twice as long each time, up to this
  var RETRY_AFTER_MAX_MS = 60000;  // a 429's or 503's Retry-After is waited out, up to this
  var DEFAULT_MAX_CHARS = 4000;  // channels.web.max_message_chars; a 413 tells the bot's own (its `limit`)
  // The server ends a chat request after worker.reply_timeout (GET /v1/bots says it in the
  // Gateway-Reply-Timeout header; 60 s by default). A request silent for that long plus some slack is
  // given up on, and the transcript followed instead.
  var DEFAULT_REPLY_TIMEOUT_MS = 60000;
  var STORE_PREFIX = "gw.";
  // The widget's words until the bot's own come with GET /v1/bots (its `replies.widget`; the same defaults).
  var TEXTS = {
    title: "Help chat", subtitle: "Answers from our help center, with sources.",
    you: "You", assistant: "Assistant", support_team: "Support team",
    placeholder: "Ask a question…", send: "Send", hint: "Enter to send, Shift+Enter for a new line.",
    waiting: "A person from our team will reply here. You can keep this page open or come back later.",
    operator_joined: "A person from our team has joined the conversation and will reply here.",
    slow: "This is taking longer than usual; the answer will appear here.",
    interrupted: "The connection was interrupted; the answer will appear here shortly.",
    unreachable: "Could not reach the server, so your message was not sent. Please try again.",
    failed: "Something went wrong. Please try again.",
    not_sent: "Not sent", retry: "Retry", empty: "Please type a message first.",
    too_long: "Your message is too long: {chars} characters, and the limit is {limit}. Please shorten it.",
  };
  var AUTHORS = { contact: "you", bot: "assistant", operator: "support_team", system: "" };  // keys of TEXTS
  var HANDOFF_TEXT = { waiting: "waiting", operator: "operator_joined" };

  /** The bot's text for `key` (`replies.widget`), else the default. */
  function t(key) {
    var own = state.texts && state.texts[key];
    return typeof own === "string" && own ? own : TEXTS[key];
  }

  var $ = function (id) { return document.getElementById(id); };
  var ui = {};
  var state = {
    bots: [], bot: null, sessionId: null, maxChars: DEFAULT_MAX_CHARS, replyTimeoutMs: DEFAULT_REPLY_TIMEOUT_MS,
    lastId: null, rendered: new Set(), unconfirmed: [],
    sourcesHeading: null,  // the bot's, from its replies and transcript (`replies.sources_heading`)
    texts: null,  // the bot's words (`replies.widget`), from GET /v1/bots
    busy: false, polling: false, pollTimer: null, pollController: null, pollFailures: 0, generation: 0, sends: 0,
    // An answer the server still works on (slow, or its stream broke): {userLi, botLi, inboundId, done}.
    awaiting: null,
  };

  // ---- storage: localStorage when allowed (private modes may refuse), else this page's memory ----
  var memoryStore = {};
  var store = {
    get: function (key) {
      try { return window.localStorage.getItem(STORE_PREFIX + key); } catch (e) { return memoryStore[key] || null; }
    },
    set: function (key, value) {
      try { window.localStorage.setItem(STORE_PREFIX + key, value); } catch (e) { memoryStore[key] = value; }
    },
  };

  function newSessionId() {
    var bytes = new Uint8Array(16);
    window.crypto.getRandomValues(bytes);
    return "web-" + Array.prototype.map.call(bytes, function (b) { return b.toString(16).padStart(2, "0"); }).join("");
  }

  // Rendering untrusted text into elements (links, sources, the Markdown subset): widget-render.js.
  var render = window.GatewayWidgetRender;
  var el = render.el, renderCitations = render.renderCitations, renderMarkdown = render.renderMarkdown;

  // The widget's parts, over its state and elements (widget-transport.js, widget-transcript.js, widget-send.js).
  var transport = window.GatewayWidgetTransport({ api: API, state: state, t: t, updateCount: updateCount });
  var botUrl = transport.botUrl, errorFrom = transport.errorFrom;
  var transcript = window.GatewayWidgetTranscript({
    state: state, ui: ui, t: t, authors: AUTHORS, render: render,
    showTyping: showTyping, showStatus: showStatus, clearStatus: clearStatus, clearError: clearError,
  });
  var renderMessage = transcript.renderMessage, appendMessage = transcript.appendMessage;
  var scrollToEnd = transcript.scrollToEnd, awaitedId = transcript.awaitedId, ingest = transcript.ingest;
  var sending = window.GatewayWidgetSend({
    state: state, ui: ui, t: t, el: el, newSessionId: newSessionId, transport: transport, transcript: transcript,
    setBusy: setBusy, clearError: clearError, showError: showError, showTyping: showTyping, updateCount: updateCount,
    schedulePoll: schedulePoll, keepSourcesHeading: keepSourcesHeading, showHandoff: showHandoff,
  });
  var send = sending.send, notStoredAfterAll = sending.notStoredAfterAll;

  // ---- notices ----
  function showError(text) { ui.error.textContent = text; ui.error.hidden = false; }
  function clearError() { ui.error.textContent = ""; ui.error.hidden = true; ui.input.removeAttribute("aria-invalid"); }
  // Neutral progress news (slow answer, broken connection): not an error, and gone when the answer comes.
  function showStatus(text) { if (ui.status.textContent !== text) ui.status.textContent = text; ui.status.hidden = false; }
  function clearStatus() { ui.status.textContent = ""; ui.status.hidden = true; }
  // The notices take height from the transcript, so keep its newest message in view.
  /** The banner follows the conversation's state: "waiting" (a person was asked for), "operator"
   * (a person has the thread); any other state hides it. */
  function showHandoff(conversationState) {
    var text = Object.prototype.hasOwnProperty.call(HANDOFF_TEXT, conversationState) ? t(HANDOFF_TEXT[conversationState]) : "";
    if (text && ui.handoff.textContent !== text) ui.handoff.textContent = text;
    ui.handoff.dataset.state = text ? conversationState : "";
    ui.handoff.hidden = !text;
    scrollToEnd();
  }
  function showTyping(on) { ui.typing.hidden = !on; scrollToEnd(); }

  function setBusy(on) {
    state.busy = on;
    ui.send.disabled = on;
    ui.form.setAttribute("aria-busy", on ? "true" : "false");
  }

  /** Keep the heading the server says the bot shows over its citations. */
  function keepSourcesHeading(data) {
    if (data && typeof data.sources_heading === "string") state.sourcesHeading = data.sources_heading;
  }

  /** The milliseconds a 429's or 503's `Retry-After` asks for, or null: seconds (the gateway's), or an HTTP date
   * (RFC 9110 allows either; a proxy or load balancer in front may send one). */
  function retryAfterMs(res) {
    var value = (res.headers.get("Retry-After") || "").trim();
    var ms = /^\d+(\.\d+)?$/.test(value) ? parseFloat(value) * 1000 : Date.parse(value) - Date.now();
    return ms > 0 && isFinite(ms) ? Math.min(ms, RETRY_AFTER_MAX_MS) : null;
  }

  /** Read the transcript once; returns how long to wait before the next read. */
  async function poll() {
    if (state.polling || !state.bot) return POLL_MS;
    state.polling = true;
    var generation = state.generation;
    var sends = state.sends;
    var controller = new AbortController();
    state.pollController = controller;  // the `online` handler gives it up: sent on the old network, it may hang
    var timer = setTimeout(function () { controller.abort(); }, POLL_TIMEOUT_MS);
    try {
      var url = botUrl("/sessions/" + encodeURIComponent(state.sessionId) + "/messages");
      var after = state.lastId;
      var waitedFor = awaitedId();
      // Ask again from the awaited message, to learn when it is answered (its status leaves "pending").
      if (waitedFor !== null && (after === null || waitedFor - 1 < Number(after))) after = waitedFor - 1;
      if (after !== null) url += "?after=" + encodeURIComponent(after);
      var res = await fetch(url, { headers: { Accept: "application/json" }, signal: controller.signal });
      if (!res.ok) {
        // Too many reads (429) or a server that says when to come back (503): as long as it asks, not sooner.
        var asked = (res.status === 429 || res.status === 503) ? retryAfterMs(res) : null;
        return asked !== null ? Math.max(asked, POLL_MS) : failedPoll();
      }
      var data = await res.json();
      state.pollFailures = 0;
      if (generation !== state.generation) return POLL_MS;
      keepSourcesHeading(data);
      ingest(Array.isArray(data) ? data : data.messages || []);
      notStoredAfterAll();
      // A reply that came while this poll was out is newer news about the state than the poll.
      if (data && typeof data.state === "string" && sends === state.sends) showHandoff(data.state);
      return POLL_MS;
    } catch (e) {
      if (controller.backOnline) return 0;  // given up as the network came back: read again now
      return failedPoll();  // offline, or no answer in time: the next read comes later, and at once when online
    } finally {
      clearTimeout(timer);
      state.pollController = null;
      state.polling = false;
    }
  }

  /** After a read that failed: wait longer each time (a server coming back is not met by every tab at once). */
  function failedPoll() {
    state.pollFailures += 1;
    return Math.min(POLL_MS * Math.pow(2, state.pollFailures - 1), POLL_BACKOFF_MAX_MS);
  }

  function schedulePoll(delay) {
    clearTimeout(state.pollTimer);
    state.pollTimer = setTimeout(async function () {
      // While a reply streams, the poll would race it and show the same message twice.
      var next = state.busy ? POLL_MS : await poll();
      schedulePoll(next);
    }, delay === undefined ? POLL_MS : delay);
  }

  /** The bot's words on the page: its heading, the composer's placeholder, hint and button, and their language. */
  function showTexts(bot) {
    state.texts = bot && bot.texts && typeof bot.texts === "object" ? bot.texts : null;
    // The page's language is the bot's (`replies.lang`): a screen reader read Spanish words with an
    // English voice, and the browser offered to translate the page from English.
    document.documentElement.lang = bot && typeof bot.lang === "string" && bot.lang ? bot.lang : "en";
    ui.title.textContent = t("title");
    ui.subtitle.textContent = t("subtitle");
    ui.input.placeholder = t("placeholder");
    ui.send.textContent = t("send");
    if (ui.hint) ui.hint.textContent = t("hint");
  }

  async function selectBot(name) {
    state.generation += 1;
    setBusy(false);  // the other bot's request, still on its way, is no reason to hold this conversation's Send
    state.bot = name;
    state.sourcesHeading = null;  // the other bot's may be in another language
    showTexts(state.bots.filter(function (b) { return b.name === name; })[0]);
    store.set("bot", name);
    state.maxChars = DEFAULT_MAX_CHARS;  // /v1/bots gives names only; a 413 corrects it
    var sessionKey = "session." + name;
    state.sessionId = store.get(sessionKey);
    if (!state.sessionId) {
      state.sessionId = newSessionId();
      store.set(sessionKey, state.sessionId);
    }
    state.lastId = null;
    state.rendered = new Set();
    state.unconfirmed = [];
    state.awaiting = null;
    ui.transcript.replaceChildren();
    showHandoff("bot");
    showTyping(false);
    clearStatus();
    clearError();
    updateCount();
    var next = await poll();
    ui.root.dataset.ready = "true";
    schedulePoll(next);
  }

  // ---- sending ----
  function charCount(text) { return Array.from(text).length; }  // code points, as the server counts

  /** Nothing a reader would see: whitespace and invisible format characters (zero-width space, BOM…); the server refuses the same (gateway.models.is_blank). */
  function isBlank(text) { return !text.replace(/[\s\u00ad\u180e\u200b-\u200f\u2060-\u2064\ufeff]/g, ""); }

  function validate(text) {
    if (!text || isBlank(text)) return t("empty");
    var n = charCount(text);
    if (n > state.maxChars) {
      return t("too_long").replace("{chars}", String(n)).replace("{limit}", String(state.maxChars));
    }
    return null;
  }

  function updateCount() {
    var n = charCount(ui.input.value);
    var near = n > state.maxChars * 0.8;
    ui.count.textContent = near ? n + " / " + state.maxChars : "";
    ui.count.classList.toggle("gw-count--over", n > state.maxChars);
  }

  function onSubmit(event) {
    event.preventDefault();
    if (state.busy || !state.bot) return;
    var text = ui.input.value.trim();
    var problem = validate(text);
    if (problem) {
      showError(problem);
      ui.input.setAttribute("aria-invalid", "true");
      ui.input.focus();
      return;
    }
    ui.input.value = "";
    send(text);
  }

  function onKeyDown(event) {
    // On a touch screen the keyboard's Enter is the only way to a new line (a phone has no Shift+Enter):
    // there the Send button sends, as in the operator console. keyCode 229: an input method's Enter that
    // only ends its composition (a Japanese or Chinese word), which Safari reports with isComposing false.
    if (window.matchMedia("(pointer: coarse)").matches || event.keyCode === 229) return;
    if (event.key === "Enter" && !event.shiftKey && !event.ctrlKey && !event.altKey && !event.metaKey && !event.isComposing) {
      event.preventDefault();
      ui.form.requestSubmit();
    }
  }

  // ---- start ----
  function normalizeBots(data) {
    var list = Array.isArray(data) ? data : (data && data.bots) || [];
    return list.map(function (b) { return typeof b === "string" ? { name: b } : b; })
      .filter(function (b) { return b && typeof b.name === "string" && b.name; });
  }

  /** No chat to offer: `text` says why, and the composer is closed. Left open, the first letter typed cleared
   * the notice (as a fixed mistake clears its error) and Send then did nothing, with nothing left saying why. */
  function offerNoChat(text) {
    showError(text);
    ui.input.disabled = true;
    ui.send.disabled = true;
  }

  async function start() {
    var controller = new AbortController();
    var timer = setTimeout(function () { controller.abort(); }, POLL_TIMEOUT_MS);  // a hung start is retried too
    try {
      var res = await fetch(API, { headers: { Accept: "application/json" }, signal: controller.signal });
      if (!res.ok) throw await errorFrom(res);
      var seconds = parseFloat(res.headers.get("Gateway-Reply-Timeout") || "");
      if (seconds > 0 && isFinite(seconds)) state.replyTimeoutMs = seconds * 1000;
      state.bots = normalizeBots(await res.json());
    } catch (err) {
      showError("The chat is not available right now. Retrying…");
      setTimeout(start, 5000);
      return;
    } finally {
      clearTimeout(timer);
    }
    if (!state.bots.length) { offerNoChat("No assistant is configured on this server."); return; }
    clearError();
    var names = state.bots.map(function (b) { return b.name; });
    var asked = new URLSearchParams(window.location.search).get("bot");
    // A page's ?bot= naming no bot with a web chat (a typo in an embed, a bot whose web chat is off) is said,
    // not swapped for the first bot, which may answer for another business. A remembered one just falls back.
    if (asked && names.indexOf(asked) < 0) {
      offerNoChat("There is no assistant named \u201c" + asked + "\u201d here.");
      return;
    }
    var wanted = asked || store.get("bot");
    var chosen = names.indexOf(wanted) >= 0 ? wanted : names[0];
    if (state.bots.length > 1) {
      ui.botSelect.replaceChildren();
      state.bots.forEach(function (b) {
        var option = el("option", null, b.name);
        option.value = b.name;
        ui.botSelect.appendChild(option);
      });
      ui.botSelect.value = chosen;
      ui.botPicker.hidden = false;
    }
    await selectBot(chosen);
  }

  function init() {
    Object.assign(ui, {  // the parts hold this object: filled in, not replaced
      root: $("gw-chat"), title: $("gw-title"), subtitle: $("gw-subtitle"), transcript: $("gw-transcript"),
      form: $("gw-form"), input: $("gw-input"), send: $("gw-send"), error: $("gw-error"), count: $("gw-count"),
      handoff: $("gw-handoff"), typing: $("gw-typing"), botPicker: $("gw-bot-picker"), botSelect: $("gw-bot"),
      status: $("gw-status"), hint: $("gw-hint"),
    });
    ui.form.addEventListener("submit", onSubmit);
    ui.input.addEventListener("keydown", onKeyDown);
    ui.input.addEventListener("input", function () {
      updateCount();
      if (!ui.error.hidden && !validate(ui.input.value.trim())) clearError();
    });
    ui.botSelect.addEventListener("change", function () { selectBot(ui.botSelect.value); });
    // On a touch screen Enter starts a new line (onKeyDown) and the hint is hidden (widget.css), and a
    // screen reader still read "Enter to send" out as the composer's description: there, only the count.
    var coarse = window.matchMedia("(pointer: coarse)");
    function describeComposer() {
      ui.input.setAttribute("aria-describedby", coarse.matches ? "gw-count" : "gw-hint gw-count");
    }
    describeComposer();
    coarse.addEventListener("change", describeComposer);
    // Back online: read the transcript now (an answer that came meanwhile), not after the failed reads' wait.
    window.addEventListener("online", function () {
      state.pollFailures = 0;
      var hanging = state.pollController;
      if (hanging) {
        // A read still out was sent before the change, maybe on a connection now dead that would hold it for
        // POLL_TIMEOUT_MS, and a read scheduled now would find it out and be skipped: give it up, and its
        // caller reads again at once.
        hanging.backOnline = true;
        hanging.abort();
      } else if (state.bot) {
        schedulePoll(0);
      }
    });
    start();
  }

  // For tests and embedders: the pure renderers, which never interpret text as HTML.
  window.GatewayWidget = Object.freeze({
    safeHttpUrl: render.safeHttpUrl,
    renderMessage: renderMessage,
    renderCitations: renderCitations,
    renderMarkdown: renderMarkdown,
    appendMessage: function (msg) { return appendMessage(renderMessage(msg)); },
  });

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
