/* The web chat widget's transcript: messages as elements, placed by their stored id, the answer still
 * awaited, and the transcript's messages matched with the bubbles this page drew. Loaded before widget.js. */
(function () {
  "use strict";

  /** The transcript over the widget `c`: its state, elements, words and notices. */
  window.GatewayWidgetTranscript = function (c) {
    var state = c.state, ui = c.ui, t = c.t, AUTHORS = c.authors;
    var el = c.render.el, renderCitations = c.render.renderCitations, renderMarkdown = c.render.renderMarkdown;
    var showTyping = c.showTyping, showStatus = c.showStatus, clearStatus = c.clearStatus, clearError = c.clearError;

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

    /** The server has this bubble's message after all (a 5xx after storing it, say): no "Not sent" any more. */
    function confirmStored(li) {
      delete li.dataset.local;
      var failed = li.querySelector(".gw-failed");
      if (!failed) return;
      li.classList.remove("gw-msg--failed");
      failed.remove();
      if (!ui.error.hidden) clearError();  // the send's error was about this message
    }

    return { renderMessage: renderMessage, fillBubble: fillBubble, scrollToEnd: scrollToEnd, appendMessage: appendMessage,
             startAwaiting: startAwaiting, awaitedId: awaitedId, settleAwaiting: settleAwaiting, ingest: ingest };
  };
})();
