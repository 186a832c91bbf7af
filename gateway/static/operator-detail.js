/* The operator console's escalation pane: reading the escalation shown (and the pages before it) and
 * drawing it. Loaded before operator.js, which gives it the console's state and helpers. */
(function () {
  "use strict";
  var RECHECK_MS = 5000;

  /** The pane's readers over the console `c`: its state, API and the helpers the drawing uses. */
  window.GatewayOperatorDetail = function (c) {
    var state = c.state, $ = c.$, api = c.api, el = c.el, who = c.who, when = c.when, learnNames = c.learnNames;
    var renderMessage = c.renderMessage, showNewer = c.showNewer, actionFailed = c.actionFailed;
    var showReplyState = c.showReplyState, showError = c.showError;

    async function loadDetail() {
      var id = state.selected, reading = ++state.detailReadings;
      if (id === null) return;
      var d = await api("/v1/escalations/" + id);
      // Another escalation was picked while this one loaded: drawing it would show one customer's thread
      // while Claim and Send reply act on another's. And only the latest reading is drawn: a live event's,
      // answered after an action's (Release), drew the escalation as it was before (claimed, Release shown).
      if (id !== state.selected || reading !== state.detailReadings) return;
      // A refresh of the escalation shown (a live event) keeps the earlier pages the operator opened.
      var list = $("op-transcript"), oldest = d.messages.length ? d.messages[0].id : Infinity;
      var same = state.detail && state.detail.id === d.id, gap = [];
      var newestShown = same && list.lastElementChild ? Number(list.lastElementChild.dataset.id) : null;
      if (newestShown !== null && newestShown < oldest && d.has_more) {
        // More than a page came since the last reading (the stream was down, events were missed): the
        // new page does not reach what is shown, and kept as they were, the messages between were missing.
        gap = await messagesBetween(id, newestShown, oldest);
        if (id !== state.selected || reading !== state.detailReadings) return;
      }
      var earlier = same ? Array.prototype.filter.call(list.children,
        function (li) { return Number(li.dataset.id) < oldest; }) : [];
      var keptNewest = earlier.length ? Number(earlier[earlier.length - 1].dataset.id) : -Infinity;
      earlier = earlier.concat(gap.filter(function (m) { return m.id > keptNewest; }).map(renderMessage));
      if (same && newestShown !== null) announce(gap.concat(d.messages).filter(function (m) { return m.id > newestShown; }));
      else $("op-announce").textContent = "";  // another escalation: what its customer said before is not news
      state.detail = d;
      learnNames(d.operator_names);
      // A pick's "Could not open escalation" clears when an escalation opens: this one, or a new pick.
      state.pickError = "";  // also when the list's own error is shown, which a pick's took the place of until now
      if ($("op-list-error").dataset.kind === "pick") showError("op-list-error", "");
      $("op-detail").hidden = false;
      $("op-title").textContent = "Escalation #" + d.id + " — " + d.state;
      $("op-meta").textContent = [d.bot, d.channel, d.customer, d.operator ? "held by " + who(d.operator) : "unclaimed",
                                  "reason: " + d.reason].filter(Boolean).join(" · ");
      $("op-summary").textContent = d.summary.text;
      list.replaceChildren.apply(list, earlier.concat(d.messages.map(renderMessage)));
      if (!earlier.length) $("op-older").hidden = !d.has_more;  // else it still tells of the page before them
      $("op-notes").replaceChildren.apply($("op-notes"), d.notes.map(function (n) {
        return el("li", null, who(n.author) + ": " + n.text);
      }));
      $("op-events").replaceChildren.apply($("op-events"), d.events.map(function (e) {
        return el("li", null, when(e.at) + " · " + who(e.actor) + " · " + e.kind +
          (e.to_state ? " → " + e.to_state : "") + (e.reason ? " · " + e.reason : ""));
      }));
      var mine = d.state === "claimed" && d.operator === state.me;
      $("op-claim").disabled = d.state !== "open";
      // Handed back, and the bot answers the customer again (no newer escalation): the operator may take
      // the conversation back without the customer asking for a person.
      $("op-take").hidden = !(d.state === "resolved" && d.conversation_state === "bot");
      $("op-release").hidden = !mine;
      $("op-takeover").hidden = !(d.state === "claimed" && !mine);
      // Another operator's claim: Resolve and Send reply were offered, and refused with a 409 once used.
      var theirs = d.state === "claimed" && !mine;
      $("op-resolve").disabled = d.state === "resolved" || theirs;
      $("op-reply").disabled = d.state === "resolved";
      $("op-reply-form").querySelector("button[type=submit]").disabled = d.state === "resolved" || theirs;
      $("op-reply").placeholder = theirs ? who(d.operator) + " holds this escalation: take it over to reply." : "";
      showNewer();
      // What an action on this escalation said went wrong stays while it is as the refusal found it.
      if (!c.keepsActionError(d, reading)) actionFailed("");
      showReplyState();
      // On a phone the escalation sits below the list (operator.css): a newly shown one is brought into view
      // here, where it is drawn. The pick's own reading is not drawn when a live event's newer one overtook
      // it, and the pick then scrolled to a pane still hidden.
      if (!same && window.matchMedia("(max-width: 48rem)").matches) $("op-detail").scrollIntoView();
      recheckUndelivered(d);
    }

    /** A reply shown as not delivered yet is read again every few seconds until it is settled: its retry
     * going through sends no live event, and "Not delivered yet" stayed on it as if it never went. */
    function recheckUndelivered(d) {
      clearTimeout(state.recheck);
      if (!d.messages.some(window.GatewayOperatorRender.undelivered)) return;
      state.recheck = setTimeout(function () { if (state.token && state.selected === d.id) c.refresh(true); }, RECHECK_MS);
    }

    /** Tell a screen reader what the customer wrote since the escalation was last read (the live region
     * `op-announce`): the transcript is drawn again whole, so it cannot be a live region itself. */
    function announce(messages) {
      var said = messages.filter(function (m) { return m.author === "contact"; })
        .map(function (m) {
          var files = window.GatewayOperatorRender.filesNote((m.attachments || []).map(function (a) { return a.kind; }));
          if (!m.text && files) return "The customer s" + files.slice(1);  // "The customer sent a file (image), …"
          return "The customer wrote: " + m.text + (files ? " (" + files + ")" : "");
        });
      if (said.length) $("op-announce").textContent = said.join("\n");
    }

    /** The messages of escalation `id` after message `after` and before message `before`, oldest first. */
    async function messagesBetween(id, after, before) {
      var found = [];
      for (;;) {
        var page = await api("/v1/escalations/" + id + "?before=" + encodeURIComponent(before));
        var newer = page.messages.filter(function (m) { return m.id > after; });
        found = newer.concat(found);
        if (newer.length < page.messages.length || !page.has_more || !newer.length) return found;
        before = newer[0].id;
      }
    }

    /** The page of messages before the oldest one shown, put above it. */
    async function loadOlder() {
      var first = $("op-transcript").firstElementChild, id = state.selected;
      if (id === null || !first) return;
      try {
        var d = await api("/v1/escalations/" + id + "?before=" + encodeURIComponent(first.dataset.id));
        if (id !== state.selected) return;  // another escalation's transcript is shown now
        var list = $("op-transcript");
        d.messages.forEach(function (m, i) { list.insertBefore(renderMessage(m), list.children[i]); });
        $("op-older").hidden = !d.has_more;
      } catch (err) { showError("op-error", err.message); }
    }

    return { loadDetail: loadDetail, loadOlder: loadOlder };
  };
})();
