/* The operator console's actions on an escalation: claim, take over, release, resolve, a note, taking a
 * conversation back, and sending a reply (with its message_id: one per reply, reused when the same reply is
 * sent again after no answer came, so the server stores and sends it once). What an action said went wrong
 * is shown here too. Loaded before operator.js, which gives it the console. */
(function () {
  "use strict";
  var REPLY_TIMEOUT_MS = 30000;

  /** The actions over the console `c`; the escalation's and the list's readings are read from `c` when used. */
  window.GatewayOperatorActions = function (c) {
    var state = c.state, $ = c.$, api = c.api, showError = c.showError, drafts = c.drafts;

    /** What the operator's own action on escalation `id` (the one shown, when not given) said went wrong, shown
     * on that escalation while it is as the refusal found it (`keepsActionError`). An answer that came after the
     * operator opened another escalation is a notice about the one acted on: in the pane, it read as a refusal
     * of the escalation shown, and stayed there. */
    function actionFailed(message, id) {
      if (id === undefined) id = state.selected;
      // "claimed by slack:U0123" (a 409) names the Slack member as the console does elsewhere.
      var said = message && message.replace(/\bslack:[A-Z0-9]+\b/g, c.who);
      if (message && id !== state.selected) {
        if (state.token) c.notice("Escalation #" + id + ": " + said, id);  // not to the next operator at this screen
        return;
      }
      state.actionError = message ? { id: id, reading: state.detailReadings, seen: null } : null;
      showError("op-error", said);
    }

    /** The server refused an action on escalation `id`: said, and the escalation read again, so that what it
     * was refused on (held by another, resolved) is drawn beside it. */
    function refused(err, id) {
      actionFailed(err.message, id);
      if (!err.unknown && state.selected === id) c.refresh(true);
    }

    /** Whether the error of an action stays on escalation `d`, drawn by reading number `reading`: a refresh after
     * a claim lost to another operator came after the 409 and wiped "already claimed by X" at once, so it stays
     * while the escalation's state and holder are those the first reading after the refusal found ("held by X"),
     * and goes once they change (X released it: it is open again, and Claim offered beside "claimed by X").
     * A reading begun before the refusal may show the escalation as it was before: it keeps the error. */
    function keepsActionError(d, reading) {
      var e = state.actionError;
      if (!e || e.id !== d.id) return false;
      if (reading <= e.reading) return true;
      var now = d.state + " " + (d.operator || "");
      if (e.seen === null) e.seen = now;
      return e.seen === now;
    }

    /** Take the shown escalation's conversation back from the bot (`POST /v1/conversations/{id}/claim`): a
     * new escalation, claimed by this operator, which is opened with the reply box focused. */
    async function takeConversation() {
      var d = state.detail;
      if (!d) return;
      actionFailed("");
      var taken;
      try {
        taken = await api("/v1/conversations/" + d.conversation_id + "/claim", { method: "POST" });
      } catch (err) { refused(err, d.id); return; }
      await c.select(taken.id);
      c.loadList().catch(function () {});  // said beside the list
      if (state.selected === taken.id) $("op-reply").focus();
    }

    /** POSTs an action on the selected escalation, then redraws it; true once the server took the action. A
     *  redraw that fails after that is shown, but is no failure of the action: a note left in its box as unsent
     *  would have been added twice. `accepted` runs as soon as the server answers, before the redraw. */
    async function act(action, body, accepted) {
      var id = state.selected;  // the one acted on: the operator may open another before the server answers
      actionFailed("");
      try {
        await api("/v1/escalations/" + id + "/" + action, { method: "POST", body: body });
      } catch (err) { refused(err, id); return false; }
      if ($("op-notice").dataset.about === String(id)) c.notice("");  // acted on: read ("took over from you")
      if (accepted) accepted();
      try { await Promise.all([c.loadDetail(), c.loadList()]); } catch (err) { actionFailed(err.message); }  // the one shown: its reading
      return true;
    }

    function newMessageId() {
      var bytes = new Uint8Array(12);
      window.crypto.getRandomValues(bytes);
      return "op-" + Array.prototype.map.call(bytes, function (b) { return b.toString(16).padStart(2, "0"); }).join("");
    }

    /** The selected escalation's unconfirmed reply, under the reply box: sending, or outcome unknown. */
    function showReplyState() {
      var pending = state.unsent[state.selected], line = $("op-reply-state");
      var phase = pending ? pending.phase : "";
      $("op-reply-form").dataset.state = phase || "idle";
      line.textContent = phase === "sending" ? "Sending…" : phase === "unknown" ?
        "Not confirmed: no answer came from the server, so this reply may or may not have reached the customer. " +
        "Check the transcript, or press Send reply again without changing it: it is delivered at most once." : "";
      line.hidden = !phase;
    }

    function forget(id, pending) { if (state.unsent[id] === pending) delete state.unsent[id]; }

    /** Send the reply in the box. The same text sent again while unconfirmed keeps its message_id, so a
     * retry after a dropped connection is answered with the reply already stored, not sent twice. */
    async function sendReply() {
      var id = state.selected, text = $("op-reply").value.trim();
      if (!text || id === null || $("op-reply-form").querySelector("button[type=submit]").disabled) return;  // Enter too
      var pending = state.unsent[id];
      if (!pending || pending.text !== text) pending = state.unsent[id] = { text: text, messageId: newMessageId() };
      actionFailed("");
      pending.phase = "sending";
      showReplyState();
      var sent;
      try {
        sent = await api("/v1/escalations/" + id + "/reply", { method: "POST", timeout: REPLY_TIMEOUT_MS,
          body: { text: text, message_id: pending.messageId } });
      } catch (err) {
        if (err.unknown) pending.phase = "unknown";
        else { forget(id, pending); refused(err, id); }  // refused: nothing was sent
        showReplyState();
        return;
      }
      forget(id, pending);
      // The platform refused it already (a customer who blocked the bot): the live notice of that may never
      // come (the stream down at that moment), so the answer says it here too.
      if (sent && sent.status === "failed") {
        var lost = "Your reply in escalation #" + id + " was not delivered to the customer: their platform refused it.";
        if (state.selected === id) actionFailed(lost); else c.notice(lost, id);
      }
      if (state.selected === id && $("op-reply").value.trim() === text) $("op-reply").value = "";
      drafts.sent(id, text);  // also when sent while another was open
      showReplyState();
      try { await Promise.all([c.loadDetail(), c.loadList()]); } catch (err) { showError("op-error", err.message); }
    }

    return { actionFailed: actionFailed, keepsActionError: keepsActionError, takeConversation: takeConversation, act: act,
             showReplyState: showReplyState, sendReply: sendReply };
  };
})();
