/* The operator console's live updates: the event stream (a fetch() body, because EventSource cannot send the
 * token), what each event says to the operator, and the readings of the list and the escalation shown that
 * the events cause. Loaded before operator.js, which gives it the console. */
(function () {
  "use strict";

  /** The live updates over the console `c`; its readings and notices are read from `c` when used. */
  window.GatewayOperatorStream = function (c) {
    var state = c.state, $ = c.$, who = c.who;

    async function stream() {
      if (state.abort) state.abort.abort();
      var token = state.token;
      if (!token) return;  // a reconnect timer left from a session signed out since
      var controller = new AbortController();
      state.abort = controller;
      try {
        var response = await fetch("/v1/escalations/stream", { headers: { Authorization: "Bearer " + token,
          Accept: "text/event-stream" }, signal: controller.signal });
        if (response.status === 401 && token === state.token) {
          // The token was revoked (the config changed and the server restarted): retrying every 2 s
          // forever left a console that looked signed in, its list no longer updating, and said nothing.
          c.signOut("That token is no longer accepted: sign in again.");
          return;
        }
        if (!response.ok || !response.body) throw new Error("stream refused");
        $("op-live").hidden = false;
        $("op-offline").hidden = true;
        await c.readEvents(response.body, onEvent);
      } catch (err) { if (controller.signal.aborted) return; }
      $("op-live").hidden = true;
      // Said in words: a small badge gone missing was all that told the operator the list had stopped
      // updating while the server was away.
      $("op-offline").hidden = !state.token;
      if (state.token && !controller.signal.aborted) setTimeout(stream, 2000);  // reconnect
    }

    async function onEvent(raw) {
      var data = raw.split("\n").filter(function (l) { return l.indexOf("data:") === 0; })
        .map(function (l) { return l.slice(5).trim(); }).join("\n");
      if (!data) return;
      var event;
      try { event = JSON.parse(data); } catch (e) { return; }
      if (/^event: ?ready$/m.test(raw)) {
        // The server listens from here on. An escalation opened between the list's first load (or the last
        // stream's end) and now sent its event to nobody, and stayed out of the list: read it again.
        refresh(true);
        return;
      }
      if (!event.escalation_id) return;
      c.learnNames(event.operator_names);
      // A customer wrote in an escalation the operator is not reading: its item says so until it is opened.
      if (event.type === "customer_message" && event.escalation_id !== state.selected) state.unread[event.escalation_id] = true;
      if (event.type === "taken_over" && event.previous_operator === state.me) {
        c.notice(who(event.operator) + " took over escalation #" + event.escalation_id + " from you.", event.escalation_id);
      } else if (event.type === "released" && event.operator !== state.me) {
        c.notice(who(event.operator) + " released escalation #" + event.escalation_id + ": it is open again.", event.escalation_id);
      } else if (event.type === "reply_failed") {
        c.notice("A reply in escalation #" + event.escalation_id + " was not delivered: " + (event.error || "unknown error"), event.escalation_id);
      } else if (event.type === "reminder") {  // nobody claimed it within the claim timeout: it was only redrawn
        c.notice("Escalation #" + event.escalation_id + " has waited " + (event.waiting_minutes ? event.waiting_minutes +
          " min" : "past the claim timeout") + " and nobody has claimed it; the customer " +
          (event.customer_told === false ? "was not told." : "was told everyone is busy."), event.escalation_id);
      } else if (event.type === "stale_claim") {
        c.notice("Escalation #" + event.escalation_id + ": the customer has waited " + event.waiting_minutes +
          " min for " + (event.operator === state.me ? "your" : who(event.operator) + "'s") + " reply.", event.escalation_id);
      }
      refresh(event.escalation_id === state.selected);
    }

    /** Read the list (and the escalation shown, with `detail`) again after live events. One reading at a
     * time, and the events that come meanwhile share the next: each event used to wait for its own
     * readings, so on a busy day (or while a model wrote a summary) the console fell further and further
     * behind the events, the stream unread. */
    function refresh(detail) {
      state.stale.list = true;
      if (detail) state.stale.detail = true;
      if (state.refreshing) return;
      state.refreshing = (async function () {
        while (state.stale.list || state.stale.detail) {
          var reading = state.stale;
          state.stale = { list: false, detail: false };
          try {
            await Promise.all([reading.list ? c.loadList() : null,
                               reading.detail && state.selected !== null ? c.loadDetail() : null]);
          } catch (err) { c.showError("op-error", err.message); }
        }
        state.refreshing = null;
      })();
    }

    return { stream: stream, refresh: refresh };
  };
})();
