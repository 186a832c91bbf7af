/* The web chat widget's sending: a message out, its answer streamed in, and a message not sent (or perhaps
 * not) offered again with its message_id. Loaded before widget.js. */
(function () {
  "use strict";

  /** Sending over the widget `c`: its state, elements, notices, transport and transcript. */
  window.GatewayWidgetSend = function (c) {
    var state = c.state, ui = c.ui, t = c.t, el = c.el, newSessionId = c.newSessionId;
    var setBusy = c.setBusy, clearError = c.clearError, showError = c.showError, showTyping = c.showTyping;
    var updateCount = c.updateCount, schedulePoll = c.schedulePoll, keepSourcesHeading = c.keepSourcesHeading;
    var showHandoff = c.showHandoff, chat = c.transport.chat, transcript = c.transcript;
    var appendMessage = transcript.appendMessage, renderMessage = transcript.renderMessage;
    var fillBubble = transcript.fillBubble, scrollToEnd = transcript.scrollToEnd;
    var startAwaiting = transcript.startAwaiting, settleAwaiting = transcript.settleAwaiting;

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
        if (err.interrupted || err.timedOut || err.stored) {
          // Stored (or perhaps stored, when the request hung): keep what streamed and follow the transcript.
          if (state.awaiting) settleAwaiting();
          startAwaiting({ userLi: userLi, botLi: botLi, inboundId: null, message: err.stored ? t("slow") : err.message,
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

    return { send: send, notStoredAfterAll: notStoredAfterAll };
  };
})();
