/* The web chat widget's transport: the chat request (SSE, JSON as fallback), its deadline and its errors.
 * Loaded before widget.js, which gives it the widget's state. */
(function () {
  "use strict";

  /** The requests over the widget `c`: its state (bot, session, limits), words, and count of characters. */
  window.GatewayWidgetTransport = function (c) {
    var API = c.api, state = c.state, t = c.t, updateCount = c.updateCount;

    var TIMEOUT_SLACK_MS = 5000;

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
      // A retry refused (429: the session read its answers too often) of a message the server keeps and answers.
      err.stored = !!(data && data.stored === true);
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
     * Errors: `status` (the server answered; `stored` when it keeps the message all the same), `interrupted` (stored, answer pending), `timedOut` (no answer
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

    return { botUrl: botUrl, errorFrom: errorFrom, chat: chat };
  };
})();
