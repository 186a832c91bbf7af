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
 */
(function () {
  "use strict";

  var API = "/v1/bots";
  var POLL_MS = 3000;
  var DEFAULT_MAX_CHARS = 4000;  // channels.web.max_message_chars; a 413 tells the bot's own (its `limit`)
  // The server ends a chat request after worker.reply_timeout (GET /v1/bots says it in the
  // Gateway-Reply-Timeout header; 60 s by default). A request silent for that long plus some slack is
  // given up on, and the transcript followed instead.
  var DEFAULT_REPLY_TIMEOUT_MS = 60000;
  var TIMEOUT_SLACK_MS = 5000;
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
    busy: false, polling: false, pollTimer: null, generation: 0, sends: 0,
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

  function authorOf(msg) {
    if (Object.prototype.hasOwnProperty.call(AUTHORS, msg.author)) return msg.author;
    return msg.direction === "in" ? "contact" : "bot";
  }

  /** The bubble's content: a visitor's text exactly as typed; a reply as (safe) Markdown. */
  function fillBubble(bubble, author, text, citations) {
    if (author === "contact") bubble.textContent = text === null || text === undefined ? "" : String(text);
    else bubble.replaceChildren(renderMarkdown(text, citations));
  }

  /** One transcript entry as an <li>; `msg` has the messages-endpoint shape. */
  function renderMessage(msg) {
    var author = authorOf(msg);
    var li = el("li", "gw-msg gw-msg--" + author);
    if (msg.id !== undefined && msg.id !== null) li.dataset.id = String(msg.id);
    if (author !== "system") li.appendChild(el("span", "gw-who", t(AUTHORS[author])));
    var bubble = el("div", "gw-bubble");
    // An Arabic or Hebrew message reads right to left: its direction comes from its own first letters,
    // not the page's (left to right, its "؟" and list numbers showed on the wrong side).
    bubble.dir = "auto";
    fillBubble(bubble, author, msg.text, msg.citations);
    li.appendChild(bubble);
    var sources = author === "contact" ? null : renderCitations(msg.citations, state.sourcesHeading);
    if (sources) li.appendChild(sources);
    if (msg.created_at) {
      var when = new Date(msg.created_at);
      if (!isNaN(when.getTime())) {
        var time = el("time", "gw-time", when.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" }));
        time.dateTime = when.toISOString();
        li.appendChild(time);
      }
    }
    return li;
  }

  function scrollToEnd() { ui.transcript.scrollTop = ui.transcript.scrollHeight; }

  function appendMessage(li) {
    ui.transcript.appendChild(li);
    scrollToEnd();
    return li;
  }

  /** Put a stored message where its id belongs: two tabs on one session see answers in their order.
   * Bubbles of this page still in flight (no id yet) stay last. */
  function placeMessage(li, id) {
    var n = Number(id);
    var before = null;
    for (var node = ui.transcript.lastElementChild; node; node = node.previousElementSibling) {
      var known = node.dataset.id !== undefined && node.dataset.id !== "" ? Number(node.dataset.id) : NaN;
      if ((!isNaN(known) && known > n) || (isNaN(known) && node.dataset.local === "pending")) before = node;
      else break;
    }
    if (isNaN(n) || !before) return appendMessage(li);
    ui.transcript.insertBefore(li, before);
    return li;
  }

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

  // ---- waiting for an answer the request did not bring (slow, interrupted, or a reload mid-answer) ----
  function startAwaiting(opts) {
    var botLi = opts.botLi && opts.botLi.parentNode ? opts.botLi : null;
    if (botLi) {
      botLi.classList.add("gw-msg--partial");  // what streamed so far stays, shown as still in progress
      botLi.setAttribute("aria-busy", "true");
      botLi.dataset.local = "pending";
    }
    if (opts.userLi) opts.userLi.dataset.local = "pending";
    state.awaiting = { userLi: opts.userLi || null, botLi: botLi, inboundId: opts.inboundId, done: false,
                       unsure: opts.unsure || null, polls: 0 };
    showTyping(true);
    if (opts.message) showStatus(opts.message);
  }

  /** The stored id of the message being answered, once known. */
  function awaitedId() {
    var a = state.awaiting;
    if (!a) return null;
    if (a.inboundId !== undefined && a.inboundId !== null && !isNaN(Number(a.inboundId))) return Number(a.inboundId);
    return a.userLi && a.userLi.dataset.id ? Number(a.userLi.dataset.id) : null;
  }

  /** The answer came (or the server finished without one): drop the partial text and the progress news. */
  function settleAwaiting() {
    var a = state.awaiting;
    if (!a) return;
    state.awaiting = null;
    if (a.botLi) a.botLi.remove();
    if (a.userLi) delete a.userLi.dataset.local;
    clearStatus();
    showTyping(state.busy);
  }

  // ---- API ----
  function botUrl(path) { return API + "/" + encodeURIComponent(state.bot) + path; }

  async function errorFrom(res) {
    var text = "";
    try { text = await res.text(); } catch (e) { /* body unreadable: the status is enough */ }
    var message = "";
    var data = null;
    try {
      data = JSON.parse(text);
      var detail = data.error || data.detail || data.message;
      if (Array.isArray(detail)) detail = detail.map(function (d) { return d && d.msg ? d.msg : String(d); }).join("; ");
      message = typeof detail === "string" ? detail : detail ? JSON.stringify(detail) : "";
    } catch (e) { /* not JSON (a proxy's HTML page, say) */ }
    if (res.status === 413 && data && data.limit > 0) {
      state.maxChars = data.limit;  // the bot's own limit: the next text over it is caught before sending
      updateCount();
    }
    var err = new Error(message || t("failed"));
    err.status = res.status;
    return err;
  }

  function tagged(message, flag) {
    var err = new Error(message);
    err[flag] = true;
    return err;
  }

  /** An AbortSignal that fires once a request has been silent past the server's wait and some slack;
   * `touch` when bytes come (a stream's tokens and pings). */
  function deadline() {
    var controller = new AbortController();
    var timer = null;
    function touch() {
      clearTimeout(timer);
      timer = setTimeout(function () { controller.abort(); }, state.replyTimeoutMs + TIMEOUT_SLACK_MS);
    }
    touch();
    return { signal: controller.signal, touch: touch, clear: function () { clearTimeout(timer); } };
  }

  function postChat(text, clientId, streaming, signal) {
    return fetch(botUrl("/chat"), {
      method: "POST",
      headers: { "Content-Type": "application/json", Accept: streaming ? "text/event-stream" : "application/json" },
      // message_id makes a retry (the JSON fallback, the Retry button) the same message, not a second one.
      body: JSON.stringify({ session_id: state.sessionId, text: text, message_id: clientId }),
      signal: signal,
    });
  }

  /** Read an SSE body: calls onToken(text) per `token`, resolves with the `done` object, rejects on `error`.
   * A body that ends or breaks before `done` (restart, network drop, timeout) rejects as `interrupted`:
   * the message is stored, so its answer will come through the transcript. */
  async function readEvents(res, onToken, limit) {
    var reader = res.body.getReader();
    var decoder = new TextDecoder();
    var buffer = "";
    for (;;) {
      var chunk;
      try { chunk = await reader.read(); } catch (e) { break; }
      if (chunk.done) break;
      limit.touch();
      buffer += decoder.decode(chunk.value, { stream: true });
      var blocks = buffer.split(/\r\n\r\n|\n\n|\r\r/);
      buffer = blocks.pop();
      for (var i = 0; i < blocks.length; i++) {
        var event = parseEvent(blocks[i]);
        if (!event) continue;
        if (event.type === "token") onToken(event.data && typeof event.data.text === "string" ? event.data.text : "");
        else if (event.type === "reset") onToken(null);  // another attempt starts over: drop what streamed
        else if (event.type === "done") { reader.cancel().catch(function () {}); return event.data; }
        else if (event.type === "error") {
          reader.cancel().catch(function () {});
          throw new Error((event.data && event.data.error) || t("failed"));
        }
      }
    }
    reader.cancel().catch(function () {});
    throw tagged(t("interrupted"), "interrupted");
  }

  function parseEvent(block) {
    var type = "message";
    var data = [];
    block.split(/\r\n|\n|\r/).forEach(function (line) {
      if (!line || line.charAt(0) === ":") return;
      var colon = line.indexOf(":");
      var field = colon < 0 ? line : line.slice(0, colon);
      var value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
      if (field === "event") type = value;
      else if (field === "data") data.push(value);
    });
    if (!data.length) return null;
    try { return { type: type, data: JSON.parse(data.join("\n")) }; } catch (e) { return null; }
  }

  /** A 2xx JSON body; one that breaks off means the message was stored but the answer got lost on the way. */
  async function readJson(res) {
    try { return await res.json(); } catch (e) { throw tagged(t("interrupted"), "interrupted"); }
  }

  /** Send `text`: stream when the server can, else (or when streaming fails to start) plain JSON.
   * Errors: `status` (the server answered), `interrupted` (stored, answer pending), `timedOut` (no answer
   * to the request in time), `unreachable` (no answer at all: not sent). */
  async function chat(text, clientId, onToken) {
    var res = null;
    var limit = deadline();
    try {
      try { res = await postChat(text, clientId, true, limit.signal); } catch (e) {
        if (limit.signal.aborted) throw tagged(t("slow"), "timedOut");
        res = null;
      }
      if (res && res.ok) {
        var type = res.headers.get("content-type") || "";
        if (type.indexOf("text/event-stream") === 0 && res.body) return await readEvents(res, onToken, limit);
        if (type.indexOf("application/json") === 0) return await readJson(res);
      } else if (res && [404, 405, 406, 415, 501].indexOf(res.status) < 0) {
        // The server understood and refused (a 4xx about the text, say): the same POST would fail again.
        throw await errorFrom(res);
      }
    } finally {
      limit.clear();
    }
    limit = deadline();
    try {
      var plain;
      try { plain = await postChat(text, clientId, false, limit.signal); } catch (e) {
        throw tagged(limit.signal.aborted ? t("slow") : t("unreachable"), limit.signal.aborted ? "timedOut" : "unreachable");
      }
      if (!plain.ok) throw await errorFrom(plain);
      return await readJson(plain);
    } finally {
      limit.clear();
    }
  }

  // ---- transcript ----
  function ingest(messages) {
    var fresh = [];
    // First recognise this page's own bubbles, so each gets its stored id before others are placed by id.
    messages.forEach(function (msg) {
      if (!msg || typeof msg !== "object") return;
      var key = msg.id === undefined || msg.id === null ? null : String(msg.id);
      if (key !== null && state.rendered.has(key)) return;
      var text = typeof msg.text === "string" ? msg.text.trim() : "";
      if (!adopt(authorOf(msg), text, key)) fresh.push(msg);
      if (key !== null) state.rendered.add(key);
    });
    fresh.forEach(function (msg) {
      var author = authorOf(msg);
      var waitedFor = awaitedId();
      if (author !== "contact" && state.awaiting && (waitedFor === null || Number(msg.id) > waitedFor)) settleAwaiting();
      placeMessage(renderMessage(msg), msg.id);
    });
    messages.forEach(function (msg) {
      if (!msg || typeof msg !== "object" || msg.id === undefined || msg.id === null) return;
      if (state.lastId === null || Number(msg.id) > Number(state.lastId)) state.lastId = msg.id;
      if (state.awaiting && Number(msg.id) === awaitedId() && msg.status && msg.status !== "pending") {
        state.awaiting.done = true;  // answered; its answer (if any) came in this batch or earlier
      }
    });
    if (state.awaiting && state.awaiting.done) settleAwaiting();
    // A reload while the newest question is still being answered: show that an answer is coming.
    var last = null;
    messages.forEach(function (msg) { if (msg && typeof msg === "object") last = msg; });
    if (last && !state.busy && !state.awaiting && authorOf(last) === "contact" && last.status === "pending") {
      var shown = ui.transcript.querySelector("[data-id='" + String(Number(last.id)) + "']");
      startAwaiting({ userLi: shown, inboundId: last.id });
    }
  }

  /** True when this page already shows `text` (sent, or answered before its id was known): don't repeat it.
   * A bot answer shown at once may be several stored messages (an acknowledgement and the answer, say). */
  function adopt(author, text, key) {
    for (var i = 0; i < state.unconfirmed.length; i++) {
      var local = state.unconfirmed[i];
      var sameSide = author === "contact" ? local.author === "contact" : local.author === "bot" && author !== "operator";
      if (!sameSide || !text) continue;
      var at = local.remaining.indexOf(text);
      if (at < 0 || (author === "contact" && local.remaining !== text)) continue;
      if (key !== null && !local.li.dataset.id) local.li.dataset.id = key;
      if (author === "contact") confirmStored(local.li);
      local.remaining = (local.remaining.slice(0, at) + local.remaining.slice(at + text.length)).trim();
      if (!local.remaining) state.unconfirmed.splice(i, 1);
      return true;
    }
    return false;
  }

  /** A request that hung without any answer may never have reached the server: when two transcript reads
   * later the message is still not there, offer the retry (same message_id, so it is never doubled). */
  function notStoredAfterAll() {
    var a = state.awaiting;
    if (!a || !a.unsure || !a.userLi || a.userLi.dataset.id) return;
    a.polls += 1;
    if (a.polls < 2) return;
    var userLi = a.userLi;
    settleAwaiting();
    markNotSent(userLi, a.unsure.text, a.unsure.clientId);
    showError(t("unreachable"));
  }

  /** The server has this bubble's message after all (a 5xx after storing it, say): no "Not sent" any more. */
  function confirmStored(li) {
    delete li.dataset.local;
    var failed = li.querySelector(".gw-failed");
    if (!failed) return;
    li.classList.remove("gw-msg--failed");
    failed.remove();
    if (!ui.error.hidden) clearError();  // the send's error was about this message
  }

  /** Keep the heading the server says the bot shows over its citations. */
  function keepSourcesHeading(data) {
    if (data && typeof data.sources_heading === "string") state.sourcesHeading = data.sources_heading;
  }

  async function poll() {
    if (state.polling || !state.bot) return;
    state.polling = true;
    var generation = state.generation;
    var sends = state.sends;
    try {
      var url = botUrl("/sessions/" + encodeURIComponent(state.sessionId) + "/messages");
      var after = state.lastId;
      var waitedFor = awaitedId();
      // Ask again from the awaited message, to learn when it is answered (its status leaves "pending").
      if (waitedFor !== null && (after === null || waitedFor - 1 < Number(after))) after = waitedFor - 1;
      if (after !== null) url += "?after=" + encodeURIComponent(after);
      var res = await fetch(url, { headers: { Accept: "application/json" } });
      if (!res.ok || generation !== state.generation) return;
      var data = await res.json();
      if (generation !== state.generation) return;
      keepSourcesHeading(data);
      ingest(Array.isArray(data) ? data : data.messages || []);
      notStoredAfterAll();
      // A reply that came while this poll was out is newer news about the state than the poll.
      if (data && typeof data.state === "string" && sends === state.sends) showHandoff(data.state);
    } catch (e) {
      /* offline for a moment: the next tick tries again */
    } finally {
      state.polling = false;
    }
  }

  function schedulePoll(delay) {
    clearTimeout(state.pollTimer);
    state.pollTimer = setTimeout(async function () {
      // While a reply streams, the poll would race it and show the same message twice.
      if (!state.busy) await poll();
      schedulePoll(POLL_MS);
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
    await poll();
    ui.root.dataset.ready = "true";
    schedulePoll();
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

  /** A bubble the server never got (5xx, proxy error page, no connection): say so and offer a retry
   * that sends the same message_id, so a copy the server did store is not answered twice. */
  function markNotSent(userLi, text, clientId) {
    userLi.classList.add("gw-msg--failed");
    userLi.dataset.local = "pending";
    var row = el("div", "gw-failed");
    row.appendChild(el("span", "gw-failed-label", t("not_sent")));
    row.appendChild(document.createTextNode(" – "));
    var retry = el("button", "gw-retry", t("retry"));
    retry.type = "button";
    retry.setAttribute("aria-label", t("retry"));
    retry.addEventListener("click", function () {
      if (state.busy) return;
      row.remove();
      userLi.classList.remove("gw-msg--failed");
      send(text, { userLi: userLi, clientId: clientId });
    });
    row.appendChild(retry);
    userLi.appendChild(row);
  }

  async function send(text, again) {
    // Another bot picked while this one answers shows that bot's conversation: this answer stays out of it.
    var generation = state.generation;
    function elsewhere() { return generation !== state.generation; }
    setBusy(true);
    clearError();
    var clientId = again ? again.clientId : newSessionId().replace("web-", "m-");
    var userLi = again ? again.userLi : appendMessage(renderMessage({ direction: "in", author: "contact", text: text }));
    userLi.dataset.local = "pending";
    var pendingUser = null;
    for (var k = 0; k < state.unconfirmed.length; k++) if (state.unconfirmed[k].li === userLi) pendingUser = state.unconfirmed[k];
    if (!pendingUser) {
      pendingUser = { author: "contact", remaining: text, li: userLi };
      state.unconfirmed.push(pendingUser);
    }
    showTyping(true);
    var botLi = null;
    var streamed = "";
    // The bubble is drawn again (the whole answer parsed) once a frame, not once a token: tokens that come
    // together (a slow network handing over what it held, a long answer) took seconds of the page's time.
    var frame = null;
    function draw() {
      if (frame !== null) cancelAnimationFrame(frame);
      frame = null;
      if (!botLi) return;
      fillBubble(botLi.querySelector(".gw-bubble"), "bot", streamed, null);
      scrollToEnd();
    }
    try {
      var reply = await chat(text, clientId, function (token) {
        if (elsewhere()) return;
        if (token === null) {  // `reset`: the tokens so far are void (a dead attempt's, or a tool round's)
          // Typing again, not an empty bubble, while a tool runs or another attempt starts over.
          streamed = "";
          if (botLi) { botLi.remove(); botLi = null; }
          showTyping(true);
          return;
        }
        if (!botLi) {
          showTyping(false);
          botLi = appendMessage(renderMessage({ direction: "out", author: "bot", text: "" }));
          botLi.setAttribute("aria-busy", "true");  // announce the whole answer once, not every token
          botLi.dataset.local = "pending";
        }
        streamed += token;
        if (frame === null) frame = requestAnimationFrame(draw);
      });
      if (frame !== null) draw();  // all that streamed: a pending answer keeps it on the page
      if (elsewhere()) return;  // stored with its bot's conversation, which shows it when picked again
      delete userLi.dataset.local;
      finishReply(reply || {}, userLi, botLi);
    } catch (err) {
      if (frame !== null) draw();  // what streamed so far, all of it, stays on the page
      if (elsewhere()) return;
      if (err.interrupted || err.timedOut) {
        // Stored (or perhaps stored, when the request hung): keep what streamed and follow the transcript.
        if (state.awaiting) settleAwaiting();
        startAwaiting({ userLi: userLi, botLi: botLi, inboundId: null, message: err.message,
                        unsure: err.timedOut && !botLi ? { text: text, clientId: clientId } : null });
      } else {
        if (botLi) botLi.remove();
        if (err.status && err.status < 500) {
          // Refused, so not stored: take the bubble back and give the text back to edit.
          userLi.remove();
          state.unconfirmed.splice(state.unconfirmed.indexOf(pendingUser), 1);
          if (!ui.input.value) ui.input.value = text;
          ui.input.setAttribute("aria-invalid", "true");
          showError(err.message || t("failed"));
        } else {
          markNotSent(userLi, text, clientId);
          showError(err.status ? err.message : t("unreachable"));
        }
      }
    } finally {
      state.sends += 1;
      if (!elsewhere()) {  // else the shown conversation's own send may be busy: not this request's to end
        setBusy(false);
        showTyping(!!state.awaiting);
        updateCount();
        ui.input.focus();
        schedulePoll(300);
      }
    }
  }

  function finishReply(reply, userLi, botLi) {
    if (reply.reply === null || reply.reply === undefined) {
      if (reply.pending) {
        // Still being worked on after the server stopped waiting: the transcript poll brings it.
        if (state.awaiting) settleAwaiting();
        startAwaiting({ userLi: userLi, botLi: botLi, inboundId: reply.message_id, message: t("slow") });
      } else if (botLi) {
        botLi.remove();
      }
      // A person holds the thread ("waiting", "operator"): the banner says so, their answer comes by poll.
      // State "bot" (rate limited, or handed back just now): no person is coming, no banner.
      showHandoff(reply.state);
      return;
    }
    keepSourcesHeading(reply);
    var li = renderMessage({ direction: "out", author: "bot", text: reply.reply, citations: reply.citations });
    if (botLi) ui.transcript.replaceChild(li, botLi); else appendMessage(li);
    scrollToEnd();
    // Matched by text when the transcript poll returns the stored copies, so it is not shown twice.
    state.unconfirmed.push({ author: "bot", remaining: String(reply.reply).trim(), li: li });
    showHandoff(reply.state);
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

  async function start() {
    try {
      var res = await fetch(API, { headers: { Accept: "application/json" } });
      if (!res.ok) throw await errorFrom(res);
      var seconds = parseFloat(res.headers.get("Gateway-Reply-Timeout") || "");
      if (seconds > 0 && isFinite(seconds)) state.replyTimeoutMs = seconds * 1000;
      state.bots = normalizeBots(await res.json());
    } catch (err) {
      showError("The chat is not available right now. Retrying…");
      setTimeout(start, 5000);
      return;
    }
    if (!state.bots.length) { showError("No assistant is configured on this server."); return; }
    clearError();
    var names = state.bots.map(function (b) { return b.name; });
    var wanted = new URLSearchParams(window.location.search).get("bot") || store.get("bot");
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
    ui = {
      root: $("gw-chat"), title: $("gw-title"), subtitle: $("gw-subtitle"), transcript: $("gw-transcript"),
      form: $("gw-form"), input: $("gw-input"), send: $("gw-send"), error: $("gw-error"), count: $("gw-count"),
      handoff: $("gw-handoff"), typing: $("gw-typing"), botPicker: $("gw-bot-picker"), botSelect: $("gw-bot"),
      status: $("gw-status"), hint: $("gw-hint"),
    };
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
