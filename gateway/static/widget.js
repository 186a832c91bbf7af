/* The web chat widget: plain JS, no build step, no external resources.
 *
 * Talks to the contract API:
 *   GET  /v1/bots                                        which bots exist (a picker when more than one)
 *   POST /v1/bots/{bot}/chat  {session_id, text}         SSE (token… then done | error), JSON as fallback
 *   GET  /v1/bots/{bot}/sessions/{session}/messages?after=ID   the transcript, polled for operator replies
 *
 * Safety rules: every text that came from a model, an operator or a document is put in the page with
 * textContent (never innerHTML), and a citation becomes a link only when its URL parses as http(s).
 */
(function () {
  "use strict";

  var API = "/v1/bots";
  var POLL_MS = 3000;
  var DEFAULT_MAX_CHARS = 4000;
  var STORE_PREFIX = "gw.";
  var AUTHORS = { contact: "You", bot: "Assistant", operator: "Support team", system: "" };

  var $ = function (id) { return document.getElementById(id); };
  var ui = {};
  var state = {
    bots: [], bot: null, sessionId: null, maxChars: DEFAULT_MAX_CHARS,
    lastId: null, rendered: new Set(), unconfirmed: [],
    busy: false, polling: false, pollTimer: null, generation: 0,
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

  /** The normalized URL when `raw` is an absolute http(s) URL, else null (javascript:, data:, relative…). */
  function safeHttpUrl(raw) {
    if (typeof raw !== "string" || raw.trim() === "") return null;
    var parsed;
    try { parsed = new URL(raw.trim()); } catch (e) { return null; }
    return parsed.protocol === "http:" || parsed.protocol === "https:" ? parsed.href : null;
  }

  function el(tag, className, text) {
    var node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  /** A "Sources" block: links for http(s) URLs, plain text for anything else. */
  function renderCitations(citations) {
    var list = Array.isArray(citations) ? citations.filter(function (c) { return c && typeof c === "object"; }) : [];
    if (!list.length) return null;
    var box = el("div", "gw-sources");
    box.appendChild(el("span", "gw-sources-label", "Sources"));
    var ul = el("ul");
    var seen = new Set();
    list.forEach(function (c) {
      var label = String(c.title || c.source || "source");
      var href = safeHttpUrl(c.url);
      var key = (href || "") + "\u0000" + label;
      if (seen.has(key)) return;
      seen.add(key);
      var li = el("li");
      var item;
      if (href) {
        item = el("a", "gw-source", label);
        item.href = href;
        item.target = "_blank";
        item.rel = "noopener noreferrer nofollow";
      } else {
        item = el("span", "gw-source", label);
      }
      if (c.source) item.title = String(c.source);
      li.appendChild(item);
      ul.appendChild(li);
    });
    box.appendChild(ul);
    return box;
  }

  function authorOf(msg) {
    if (Object.prototype.hasOwnProperty.call(AUTHORS, msg.author)) return msg.author;
    return msg.direction === "in" ? "contact" : "bot";
  }

  /** One transcript entry as an <li>; `msg` has the messages-endpoint shape. */
  function renderMessage(msg) {
    var author = authorOf(msg);
    var li = el("li", "gw-msg gw-msg--" + author);
    if (msg.id !== undefined && msg.id !== null) li.dataset.id = String(msg.id);
    if (author !== "system") li.appendChild(el("span", "gw-who", AUTHORS[author]));
    li.appendChild(el("div", "gw-bubble", msg.text === null || msg.text === undefined ? "" : msg.text));
    var sources = author === "contact" ? null : renderCitations(msg.citations);
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

  // ---- notices ----
  function showError(text) { ui.error.textContent = text; ui.error.hidden = false; }
  function clearError() { ui.error.textContent = ""; ui.error.hidden = true; ui.input.removeAttribute("aria-invalid"); }
  // Both notices take height from the transcript, so keep its newest message in view.
  function showHandoff(on) { ui.handoff.hidden = !on; scrollToEnd(); }
  function showTyping(on) { ui.typing.hidden = !on; scrollToEnd(); }

  function setBusy(on) {
    state.busy = on;
    ui.send.disabled = on;
    ui.form.setAttribute("aria-busy", on ? "true" : "false");
  }

  // ---- API ----
  function botUrl(path) { return API + "/" + encodeURIComponent(state.bot) + path; }

  async function errorFrom(res) {
    var text = "";
    try { text = await res.text(); } catch (e) { /* body unreadable: the status is enough */ }
    var message = "";
    try {
      var data = JSON.parse(text);
      var detail = data.error || data.detail || data.message;
      if (Array.isArray(detail)) detail = detail.map(function (d) { return d && d.msg ? d.msg : String(d); }).join("; ");
      message = typeof detail === "string" ? detail : detail ? JSON.stringify(detail) : "";
    } catch (e) { /* not JSON */ }
    var err = new Error(message || "The server answered " + res.status + ". Please try again.");
    err.status = res.status;
    return err;
  }

  function postChat(text, clientId, streaming) {
    return fetch(botUrl("/chat"), {
      method: "POST",
      headers: { "Content-Type": "application/json", Accept: streaming ? "text/event-stream" : "application/json" },
      // message_id makes the JSON fallback of a failed stream the same message, not a second one.
      body: JSON.stringify({ session_id: state.sessionId, text: text, message_id: clientId }),
    });
  }

  /** Read an SSE body: calls onToken(text) per `token`, resolves with the `done` object, rejects on `error`. */
  async function readEvents(res, onToken) {
    var reader = res.body.getReader();
    var decoder = new TextDecoder();
    var buffer = "";
    for (;;) {
      var chunk = await reader.read();
      if (chunk.done) break;
      buffer += decoder.decode(chunk.value, { stream: true });
      var blocks = buffer.split(/\r\n\r\n|\n\n|\r\r/);
      buffer = blocks.pop();
      for (var i = 0; i < blocks.length; i++) {
        var event = parseEvent(blocks[i]);
        if (!event) continue;
        if (event.type === "token") onToken(event.data && typeof event.data.text === "string" ? event.data.text : "");
        else if (event.type === "done") { reader.cancel().catch(function () {}); return event.data; }
        else if (event.type === "error") {
          reader.cancel().catch(function () {});
          throw new Error((event.data && event.data.error) || "The assistant could not answer.");
        }
      }
    }
    var interrupted = new Error("The connection was interrupted; the answer will appear here shortly.");
    interrupted.interrupted = true;
    throw interrupted;
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

  /** Send `text`: stream when the server can, else (or when streaming fails to start) plain JSON. */
  async function chat(text, onToken) {
    var clientId = newSessionId().replace("web-", "m-");
    var res = null;
    try { res = await postChat(text, clientId, true); } catch (e) { res = null; }
    if (res && res.ok) {
      var type = res.headers.get("content-type") || "";
      if (type.indexOf("text/event-stream") === 0 && res.body) return readEvents(res, onToken);
      if (type.indexOf("application/json") === 0) return res.json();
    } else if (res && [404, 405, 406, 415, 501].indexOf(res.status) < 0) {
      // The server understood and refused (a 4xx about the text, say): the same POST would fail again.
      throw await errorFrom(res);
    }
    var plain = await postChat(text, clientId, false);
    if (!plain.ok) throw await errorFrom(plain);
    return plain.json();
  }

  // ---- transcript ----
  function ingest(messages) {
    messages.forEach(function (msg) {
      if (!msg || typeof msg !== "object") return;
      var key = msg.id === undefined || msg.id === null ? null : String(msg.id);
      if (key !== null && state.rendered.has(key)) return;
      var text = typeof msg.text === "string" ? msg.text.trim() : "";
      var author = authorOf(msg);
      if (!adopt(author, text, key)) appendMessage(renderMessage(msg));
      if (key !== null) state.rendered.add(key);
      if (author === "operator") showHandoff(false);
    });
    if (messages.length && messages[messages.length - 1] && messages[messages.length - 1].id != null) {
      state.lastId = messages[messages.length - 1].id;
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
      local.remaining = (local.remaining.slice(0, at) + local.remaining.slice(at + text.length)).trim();
      if (!local.remaining) state.unconfirmed.splice(i, 1);
      return true;
    }
    return false;
  }

  async function poll() {
    if (state.polling || !state.bot) return;
    state.polling = true;
    var generation = state.generation;
    try {
      var url = botUrl("/sessions/" + encodeURIComponent(state.sessionId) + "/messages");
      if (state.lastId !== null) url += "?after=" + encodeURIComponent(state.lastId);
      var res = await fetch(url, { headers: { Accept: "application/json" } });
      if (!res.ok || generation !== state.generation) return;
      var data = await res.json();
      if (generation !== state.generation) return;
      ingest(Array.isArray(data) ? data : data.messages || []);
      if (data && data.state === "bot") showHandoff(false);  // handed back: the bot answers again
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

  async function selectBot(name) {
    state.generation += 1;
    state.bot = name;
    store.set("bot", name);
    var info = state.bots.find(function (b) { return b.name === name; }) || {};
    state.maxChars = info.max_message_chars > 0 ? info.max_message_chars : DEFAULT_MAX_CHARS;
    ui.title.textContent = info.title || info.display_name || "Help chat";
    if (info.description) ui.subtitle.textContent = info.description;
    var sessionKey = "session." + name;
    state.sessionId = store.get(sessionKey);
    if (!state.sessionId) {
      state.sessionId = newSessionId();
      store.set(sessionKey, state.sessionId);
    }
    state.lastId = null;
    state.rendered = new Set();
    state.unconfirmed = [];
    ui.transcript.replaceChildren();
    showHandoff(false);
    clearError();
    updateCount();
    await poll();
    ui.root.dataset.ready = "true";
    schedulePoll();
  }

  // ---- sending ----
  function charCount(text) { return Array.from(text).length; }  // code points, as the server counts

  function validate(text) {
    if (!text) return "Please type a message first.";
    var n = charCount(text);
    if (n > state.maxChars) {
      return "Your message is too long: " + n + " characters, and the limit is " + state.maxChars + ". Please shorten it.";
    }
    return null;
  }

  function updateCount() {
    var n = charCount(ui.input.value);
    var near = n > state.maxChars * 0.8;
    ui.count.textContent = near ? n + " / " + state.maxChars : "";
    ui.count.classList.toggle("gw-count--over", n > state.maxChars);
  }

  async function send(text) {
    setBusy(true);
    clearError();
    var userLi = appendMessage(renderMessage({ direction: "in", author: "contact", text: text }));
    var pendingUser = { author: "contact", remaining: text, li: userLi };
    state.unconfirmed.push(pendingUser);
    showTyping(true);
    var botLi = null;
    var streamed = "";
    try {
      var reply = await chat(text, function (token) {
        if (!botLi) {
          showTyping(false);
          botLi = appendMessage(renderMessage({ direction: "out", author: "bot", text: "" }));
          botLi.setAttribute("aria-busy", "true");  // announce the whole answer once, not every token
        }
        streamed += token;
        botLi.querySelector(".gw-bubble").textContent = streamed;
        scrollToEnd();
      });
      finishReply(reply || {}, botLi);
    } catch (err) {
      if (botLi) botLi.remove();
      if (err.interrupted) {
        showError(err.message);
      } else {
        if (err.status && err.status < 500) {
          // Refused, so not stored: take the bubble back and give the text back to edit.
          userLi.remove();
          state.unconfirmed.splice(state.unconfirmed.indexOf(pendingUser), 1);
          if (!ui.input.value) ui.input.value = text;
          ui.input.setAttribute("aria-invalid", "true");
        }
        showError(err.message || "Something went wrong. Please try again.");
      }
    } finally {
      showTyping(false);
      setBusy(false);
      updateCount();
      ui.input.focus();
      schedulePoll(300);
    }
  }

  function finishReply(reply, botLi) {
    if (reply.reply === null || reply.reply === undefined) {
      if (botLi) botLi.remove();
      if (reply.pending) {
        // Still being worked on after the server stopped waiting: the transcript poll brings it.
        showError("This is taking longer than usual; the answer will appear here.");
      } else if (reply.state === "waiting" || reply.state === "operator") {
        // An operator holds the thread: their answer arrives through the transcript poll.
        showHandoff(true);
      }
      // Otherwise (state "bot": rate limited, or handed back just now) no person is coming: no banner.
      return;
    }
    var li = renderMessage({ direction: "out", author: "bot", text: reply.reply, citations: reply.citations });
    if (botLi) ui.transcript.replaceChild(li, botLi); else appendMessage(li);
    scrollToEnd();
    // Matched by text when the transcript poll returns the stored copies, so it is not shown twice.
    state.unconfirmed.push({ author: "bot", remaining: String(reply.reply).trim(), li: li });
    showHandoff(false);
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
      state.bots = normalizeBots(await res.json());
    } catch (err) {
      showError("The chat is not available right now. Retrying…");
      setTimeout(start, 5000);
      return;
    }
    if (!state.bots.length) { showError("No assistant is configured on this server."); return; }
    var names = state.bots.map(function (b) { return b.name; });
    var wanted = new URLSearchParams(window.location.search).get("bot") || store.get("bot");
    var chosen = names.indexOf(wanted) >= 0 ? wanted : names[0];
    if (state.bots.length > 1) {
      ui.botSelect.replaceChildren();
      state.bots.forEach(function (b) {
        var option = el("option", null, b.title || b.display_name || b.name);
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
    };
    ui.form.addEventListener("submit", onSubmit);
    ui.input.addEventListener("keydown", onKeyDown);
    ui.input.addEventListener("input", function () {
      updateCount();
      if (!ui.error.hidden && !validate(ui.input.value.trim())) clearError();
    });
    ui.botSelect.addEventListener("change", function () { selectBot(ui.botSelect.value); });
    start();
  }

  // For tests and embedders: the pure renderers, which never interpret text as markup.
  window.GatewayWidget = Object.freeze({
    safeHttpUrl: safeHttpUrl,
    renderMessage: renderMessage,
    renderCitations: renderCitations,
    appendMessage: function (msg) { return appendMessage(renderMessage(msg)); },
  });

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
