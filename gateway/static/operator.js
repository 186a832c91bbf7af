/* The operator console. Talks to /v1/escalations* with the operator's bearer token (sessionStorage).
 * Safety: every string from customers, models, documents or operators goes in with textContent only.
 * Live updates: a fetch()-read server-sent event stream, because EventSource cannot send the token.
 * Replies carry a message_id: one per reply, reused when the same reply is sent again after no answer came,
 * so the server stores and sends it once. */
(function () {
  "use strict";
  var KEY = "gw-operator-token";
  var REPLY_TIMEOUT_MS = 30000;
  var state = { token: sessionStorage.getItem(KEY) || "", selected: null, detail: null, abort: null, me: null,
                unsent: {}, listLoads: 0, detailReadings: 0, escalations: [], unread: {},
                stale: { list: false, detail: false }, refreshing: null, names: {} };  // unread: escalation id → true  // unsent: escalation id → the reply not yet confirmed: { text, messageId, phase }
  function $(id) { return document.getElementById(id); }
  var render = window.GatewayOperatorRender, keys = window.GatewayOperatorKeys;
  var el = render.el, byWait = render.byWait, waiting = render.waiting, when = render.when, renderMessage = render.renderMessage;
  // The API with this console's token, and the live stream's reading: operator-api.js.
  var transport = window.GatewayOperatorApi({ state: state, signOut: signOut });
  var drafts = window.GatewayOperatorDrafts(state, $("op-reply"));  // each escalation's, kept across reloads
  var api = transport.api, readEvents = transport.readEvents;
  /** An operator as people know them: a Slack operator (`slack:U0123`) by the name Slack gives them (the
   * API's `operator_names`), anyone else (and a Slack member Slack would not name) as they are held. */
  function who(operator) { return (operator && state.names[operator]) || operator; }
  function learnNames(names) { if (names && typeof names === "object") Object.assign(state.names, names); }
  // `kind`: above the list, a list that did not load ("list") or a pick that did not open ("pick"); each clears its own only.
  function showError(id, message, kind) { var n = $(id); n.textContent = message || ""; n.hidden = !message; n.dataset.kind = message && kind || ""; }

  async function loadList() {
    var list = $("op-escalations");
    var load = ++state.listLoads;
    var body;
    try {
      body = await api("/v1/escalations?state=" + encodeURIComponent($("op-filter").value));
      // Loads overlap (a live event, a change of filter): only the newest may draw, or an older answer
      // (the previous filter's) came last and stayed on the page.
      if (load !== state.listLoads) return;
    } catch (err) {
      if (load !== state.listLoads) return;
      // Shown beside the list: the detail pane's error line is hidden while nothing is picked, and the
      // old list stayed under the new filter's name, as if it were the answer.
      list.replaceChildren();
      showError("op-list-error", "Could not load the escalations: " + err.message, "list");
      throw err;
    }
    if ($("op-list-error").dataset.kind === "list") showError("op-list-error", state.pickError || "", "pick");  // a pick's stays (back after the list's own): every live event reads the list
    learnNames(body.operator_names);
    state.escalations = body.escalations;
    drawList(list, body.escalations);
  }

  /** Draw the escalations, keeping each one's button (and its parts) from the last drawing. The list is
   * drawn again on every live event: a new button in the old one's place between the press and the
   * release of a tap or click got no click (the pressed button had left the page), so the escalation the
   * operator picked never opened; a kept button also keeps the keyboard focus. */
  function drawList(list, escalations) {
    var kept = {};
    Array.prototype.forEach.call(list.children, function (li) { kept[li.dataset.id] = li; });
    var items = byWait(escalations).map(function (e) {
      var li = kept[e.id] || listItem(e.id);
      delete kept[e.id];
      var button = li.firstElementChild, parts = button.children;
      button.setAttribute("aria-selected", String(e.id === state.selected));
      parts[0].className = "op-state op-state--" + e.state;
      parts[0].textContent = e.state;
      parts[1].textContent = "#" + e.id + " " + (e.customer || "customer");
      parts[2].textContent = " · " + e.bot + " · " + (e.channel || "") + " — " + e.reason;
      parts[3].textContent = waiting(e);
      parts[3].title = render.waitTitle(e);
      parts[3].hidden = e.state !== "open";
      parts[4].hidden = !state.unread[e.id];
      parts[5].textContent = e.last_customer_message ? "“" + e.last_customer_message.text + "”" : "";
      return li;
    });
    Object.keys(kept).forEach(function (id) { kept[id].remove(); });
    // Placed from the last up, each before the one after it, so that an item moves only when what follows
    // it changed: [A, B, C] → [B, C, A] (A claimed) moves A alone. A moved node loses the keyboard focus
    // and a press on it; placed front to back, B and C moved instead.
    for (var i = items.length - 1, next = null; i >= 0; next = items[i], i--) {
      if (items[i].parentNode !== list || items[i].nextSibling !== next) list.insertBefore(items[i], next);
    }
    // Read from another tab or window: the tab's title says someone waits, or wrote, without opening it.
    var waitingNow = escalations.filter(function (e) { return e.state === "open"; }).length;
    var unread = escalations.filter(function (e) { return state.unread[e.id]; }).length;
    var counts = [waitingNow ? waitingNow + " waiting" : "", unread ? unread + " new" : ""].filter(Boolean);
    document.title = (counts.length ? "(" + counts.join(", ") + ") " : "") + "Operator console";
    showNewer();
  }

  /** On a resolved escalation whose customer asked for a person again: the way to the new one (the old
   * one's reply box is closed, and the customer's new messages go to the new one). */
  function showNewer() {
    var d = state.detail, button = $("op-newer");
    var newer = d && d.state === "resolved" ? state.escalations.filter(function (e) {
      return e.conversation_id === d.conversation_id && e.id > d.id && e.state !== "resolved";
    })[0] : null;
    button.hidden = !newer;
    if (newer) {
      $("op-take").hidden = true;  // the customer's new escalation is the one to claim
      button.dataset.id = newer.id;
      button.textContent = "The customer asked again: open #" + newer.id;
    }
  }

  function listItem(id) {
    var li = el("li"), button = el("button", "op-item");
    li.dataset.id = id;
    button.type = "button";
    button.setAttribute("role", "option");
    button.dataset.id = id;
    button.append(el("span"), el("strong"), el("span", "op-meta"), el("span", "op-wait"), el("span", "op-unread", "new message"), el("span", "op-said"));
    button.addEventListener("click", function () { select(id); });
    li.appendChild(button);
    return li;
  }

  async function select(id) {
    // The reply box is one for every escalation: a reply written for one customer stayed in it when the
    // operator opened another, one Enter away from reaching the wrong person. Each keeps its own draft.
    if (state.selected !== id) $("op-reply").value = drafts.get(id);
    state.selected = id;
    delete state.unread[id];
    if ($("op-notice").dataset.about === String(id)) notice("");  // read: the escalation it told of is open
    drawList($("op-escalations"), state.escalations);  // selected, and no longer unread
    try {
      await loadDetail();
    } catch (err) {
      if (id !== state.selected) return;
      // The escalation shown before stayed on the page under the new pick, its Claim and Send reply
      // acting on the one that could not be read: nothing is shown rather than the wrong customer.
      state.detail = null;
      $("op-detail").hidden = true;
      showError("op-list-error", state.pickError = "Could not open escalation #" + id + ": " + err.message, "pick");
      return;
    }
    // On a phone the escalation sits below the list (operator.css): in view (one shown anew is as it is drawn).
    if (window.matchMedia("(max-width: 48rem)").matches) $("op-detail").scrollIntoView();
  }

  // The escalation shown: operator-detail.js, over this console's state and helpers.
  var detail = window.GatewayOperatorDetail({
    state: state, $: $, api: api, el: el, who: who, when: when, learnNames: learnNames,
    renderMessage: renderMessage, showNewer: showNewer, actionFailed: actionFailed,
    showReplyState: showReplyState, showError: showError, refresh: refresh,
  });
  var loadDetail = detail.loadDetail, loadOlder = detail.loadOlder;

  /** A notice about escalation `about`: it stays until that escalation is opened (or another notice comes). */
  function notice(message, about) {
    var n = $("op-notice");
    n.textContent = message || "";
    n.hidden = !message;
    n.dataset.about = about || "";
  }

  /** What the operator's own action said went wrong: kept on the page across refreshes. */
  function actionFailed(message) {
    state.actionFailed = !!message;
    // "claimed by slack:U0123" (a 409) names the Slack member as the console does elsewhere.
    showError("op-error", message && message.replace(/\bslack:[A-Z0-9]+\b/g, who));
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
    } catch (err) { actionFailed(err.message); return; }
    await select(taken.id);
    loadList().catch(function () {});  // said beside the list
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
    } catch (err) { actionFailed(err.message); return false; }
    if ($("op-notice").dataset.about === String(id)) notice("");  // acted on: read ("took over from you")
    if (accepted) accepted();
    try { await Promise.all([loadDetail(), loadList()]); } catch (err) { actionFailed(err.message); }
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
      else { forget(id, pending); actionFailed(err.message); }  // refused: nothing was sent
      showReplyState();
      return;
    }
    forget(id, pending);
    // The platform refused it already (a customer who blocked the bot): the live notice of that may never
    // come (the stream down at that moment), so the answer says it here too.
    if (sent && sent.status === "failed") {
      var lost = "Your reply in escalation #" + id + " was not delivered to the customer: their platform refused it.";
      if (state.selected === id) actionFailed(lost); else notice(lost, id);
    }
    if (state.selected === id && $("op-reply").value.trim() === text) $("op-reply").value = "";
    drafts.sent(id, text);  // also when sent while another was open
    showReplyState();
    try { await Promise.all([loadDetail(), loadList()]); } catch (err) { showError("op-error", err.message); }
  }

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
        signOut("That token is no longer accepted: sign in again.");
        return;
      }
      if (!response.ok || !response.body) throw new Error("stream refused");
      $("op-live").hidden = false;
      $("op-offline").hidden = true;
      await readEvents(response.body, onEvent);
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
    learnNames(event.operator_names);
    // A customer wrote in an escalation the operator is not reading: its item says so until it is opened.
    if (event.type === "customer_message" && event.escalation_id !== state.selected) state.unread[event.escalation_id] = true;
    if (event.type === "taken_over" && event.previous_operator === state.me) {
      notice(who(event.operator) + " took over escalation #" + event.escalation_id + " from you.", event.escalation_id);
    } else if (event.type === "released" && event.operator !== state.me) {
      notice(who(event.operator) + " released escalation #" + event.escalation_id + ": it is open again.", event.escalation_id);
    } else if (event.type === "reply_failed") {
      notice("A reply in escalation #" + event.escalation_id + " was not delivered: " + (event.error || "unknown error"), event.escalation_id);
    } else if (event.type === "stale_claim") {
      notice("Escalation #" + event.escalation_id + ": the customer has waited " + event.waiting_minutes +
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
          await Promise.all([reading.list ? loadList() : null,
                             reading.detail && state.selected !== null ? loadDetail() : null]);
        } catch (err) { showError("op-error", err.message); }
      }
      state.refreshing = null;
    })();
  }

  async function signIn(token) {
    state.token = token;
    try {
      await loadList();
      // Refused (signed out): the list's load gives up without an error then, and asking who this is
      // with no token signed out a second time, wiping the token the operator was typing again.
      if (state.token !== token) return;
      state.me = (await api("/v1/operators/me")).name;
    } catch (err) {
      if (err.message !== "unauthorized") showError("op-login-error", err.message);
      return;
    }
    sessionStorage.setItem(KEY, token);
    $("op-login").hidden = true;
    $("op-main").hidden = false;
    $("op-signout").hidden = false;
    $("op-who").textContent = "signed in as " + state.me;
    showError("op-login-error", "");
    document.body.dataset.ready = "true";
    stream();
    if (!state.clock) {  // the waits shown grow while nothing else changes
      state.clock = setInterval(function () { if (state.token) drawList($("op-escalations"), state.escalations); }, 30000);
    }
  }

  function signOut(message) {
    state.token = "";
    drafts.clearAll();
    state.me = null;
    sessionStorage.removeItem(KEY);
    if (state.abort) state.abort.abort();
    $("op-login").hidden = false;
    $("op-main").hidden = true;
    $("op-signout").hidden = true;
    $("op-who").textContent = "";
    $("op-offline").hidden = true;
    document.title = "Operator console";
    // Nothing of this operator's session stays for the next one to sign in at this screen: the
    // escalation open (of bots the next may not serve), its draft reply, the list and its notices.
    Object.assign(state, { selected: null, detail: null, unsent: {}, escalations: [], unread: {}, names: {} });
    state.listLoads++;  // a list or an escalation still loading is not drawn
    state.detailReadings++;
    $("op-escalations").replaceChildren();
    $("op-transcript").replaceChildren();
    $("op-announce").textContent = "";
    $("op-detail").hidden = true;
    $("op-reply").value = "";
    $("op-token").value = "";
    notice("");
    showError("op-list-error", "");
    showError("op-login-error", message || "");
  }

  $("op-login").addEventListener("submit", function (e) { e.preventDefault(); signIn($("op-token").value.trim()); });
  $("op-signout").addEventListener("click", function () { signOut(""); });
  $("op-filter").addEventListener("change", function () { loadList().catch(function () {}); });  // shown already
  // Claim disables its own button, which dropped the keyboard focus to the page: the reply box is next.
  async function claimThenReply(body) { if (await act("claim", body)) $("op-reply").focus(); }
  $("op-claim").addEventListener("click", function () { claimThenReply(); });
  $("op-resolve").addEventListener("click", function () { act("resolve"); });
  $("op-take").addEventListener("click", function () { takeConversation(); });
  $("op-release").addEventListener("click", function () { act("release"); });
  $("op-takeover").addEventListener("click", function () { claimThenReply({ take_over: true }); });
  $("op-older").addEventListener("click", function () { loadOlder(); });
  $("op-newer").addEventListener("click", function () { select(Number($("op-newer").dataset.id)); });
  $("op-reply-form").addEventListener("submit", function (e) { e.preventDefault(); sendReply(); });
  var submitsOnEnter = keys.submitsOnEnter;
  submitsOnEnter("op-reply", "op-reply-form");
  submitsOnEnter("op-note", "op-note-form");
  $("op-note-form").addEventListener("submit", async function (e) {
    e.preventDefault();
    var box = $("op-note"), text = box.value.trim();
    // A second Enter while the first note is on its way would add it twice.
    if (!text || box.readOnly) return;
    box.readOnly = true;
    try { await act("notes", { text: text }, function () { box.value = ""; }); } finally { box.readOnly = false; }
  });
  keys.arrowsMoveIn("op-escalations");
  keys.describedByHints(["op-reply", "op-note"]);
  if (state.token) signIn(state.token);
})();
