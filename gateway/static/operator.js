/* The operator console. Talks to /v1/escalations* with the operator's bearer token (sessionStorage).
 * Safety: every string from customers, models, documents or operators goes in with textContent only.
 * This file holds the console's state, signing in and out, and picking an escalation, and joins its parts
 * (each loaded before it, each given the console `c`): operator-api.js (the API with the token),
 * operator-list.js (the list), operator-detail.js (the escalation shown), operator-actions.js (claim, reply,
 * …), operator-stream.js (live updates), operator-drafts.js and operator-keys.js. */
(function () {
  "use strict";
  var KEY = "gw-operator-token";
  var state = { token: sessionStorage.getItem(KEY) || "", selected: null, detail: null, abort: null, me: null,
                unsent: {}, listLoads: 0, detailReadings: 0, escalations: [], unread: {},
                stale: { list: false, detail: false }, refreshing: null, names: {} };  // unread: escalation id → true  // unsent: escalation id → the reply not yet confirmed: { text, messageId, phase }
  function $(id) { return document.getElementById(id); }
  var render = window.GatewayOperatorRender, keys = window.GatewayOperatorKeys;
  /** An operator as people know them: a Slack operator (`slack:U0123`) by the name Slack gives them (the
   * API's `operator_names`), anyone else (and a Slack member Slack would not name) as they are held. */
  function who(operator) { return (operator && state.names[operator]) || operator; }
  function learnNames(names) { if (names && typeof names === "object") Object.assign(state.names, names); }
  // `kind`: above the list, a list that did not load ("list") or a pick that did not open ("pick"); each clears its own only.
  function showError(id, message, kind) { var n = $(id); n.textContent = message || ""; n.hidden = !message; n.dataset.kind = message && kind || ""; }

  // The console its parts share; each part's functions are read from it when used, so the order they are made in does not matter.
  var c = { state: state, $: $, who: who, learnNames: learnNames, showError: showError, notice: notice,
            signOut: signOut, select: select };
  // The API with this console's token, and the live stream's reading: operator-api.js.
  var transport = window.GatewayOperatorApi({ state: state, signOut: signOut });
  var api = c.api = transport.api;
  c.readEvents = transport.readEvents;
  c.drafts = window.GatewayOperatorDrafts(state, $("op-reply"));  // each escalation's, kept across reloads
  var drafts = c.drafts;
  var list = window.GatewayOperatorList(c), drawList = list.drawList, loadList = c.loadList = list.loadList;
  var actions = window.GatewayOperatorActions(c), act = actions.act;
  var live = window.GatewayOperatorStream(c), stream = live.stream;
  c.refresh = live.refresh;
  // The escalation shown: operator-detail.js, over this console's state and helpers.
  var detail = window.GatewayOperatorDetail({
    state: state, $: $, api: api, el: render.el, who: who, when: render.when, learnNames: learnNames,
    renderMessage: render.renderMessage, showNewer: list.showNewer, actionFailed: actions.actionFailed,
    keepsActionError: actions.keepsActionError,
    showReplyState: actions.showReplyState, showError: showError, refresh: live.refresh,
  });
  var loadDetail = c.loadDetail = detail.loadDetail, loadOlder = detail.loadOlder;

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

  /** A notice about escalation `about`: it stays until that escalation is opened (or another notice comes). */
  function notice(message, about) {
    var n = $("op-notice");
    n.textContent = message || "";
    n.hidden = !message;
    n.dataset.about = about || "";
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

  /** Sign out from the button. A claim left held waited for a colleague to notice it (the stale-claim ping comes
   * only once a customer has waited a whole claim timeout, and never after a "one moment" reply): the operator is
   * asked to release theirs first. Cancel keeps them signed in. */
  async function signOutAsked() {
    var held = [];
    try {
      held = (await api("/v1/escalations?state=claimed")).escalations.filter(function (e) { return e.operator === state.me; });
    } catch (err) { held = []; }  // the server away: nothing to release from here
    if (held.length) {
      var ids = held.map(function (e) { return "#" + e.id; }).join(", ");
      if (!window.confirm("You still hold escalation " + ids + ". Release " + (held.length === 1 ? "it" : "them") +
          " so a colleague can take over, and sign out? (Cancel keeps you signed in.)")) return;
      for (var i = 0; i < held.length; i++) {
        try {
          await api("/v1/escalations/" + held[i].id + "/release", { method: "POST", body: { reason: "signed out" } });
        } catch (err) { /* taken over or resolved meanwhile: not theirs to release any more */ }
      }
    }
    signOut("");
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
    Object.assign(state, { selected: null, detail: null, unsent: {}, escalations: [], counts: {}, unread: {}, names: {},
                           actionError: null });
    state.listLoads++;  // a list or an escalation still loading is not drawn
    state.detailReadings++;
    $("op-escalations").replaceChildren();
    $("op-list-more").hidden = true;
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
  $("op-signout").addEventListener("click", function () { signOutAsked(); });
  $("op-filter").addEventListener("change", function () { loadList().catch(function () {}); });  // shown already
  // Claim disables its own button, which dropped the keyboard focus to the page: the reply box is next.
  async function claimThenReply(body) { if (await act("claim", body)) $("op-reply").focus(); }
  $("op-claim").addEventListener("click", function () { claimThenReply(); });
  $("op-resolve").addEventListener("click", function () { act("resolve"); });
  $("op-take").addEventListener("click", function () { actions.takeConversation(); });
  $("op-release").addEventListener("click", function () { act("release"); });
  $("op-takeover").addEventListener("click", function () { claimThenReply({ take_over: true }); });
  $("op-older").addEventListener("click", function () { loadOlder(); });
  $("op-newer").addEventListener("click", function () { select(Number($("op-newer").dataset.id)); });
  $("op-reply-form").addEventListener("submit", function (e) { e.preventDefault(); actions.sendReply(); });
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
