/* The operator console's reply drafts: one per escalation, kept in sessionStorage under the operator's name
 * (a reload, or a tab the browser discarded, lost a half-written reply), cleared once that reply is sent,
 * and every one of the operator's cleared when they sign out. The tab's, as the token is: in localStorage a
 * draft outlived a tab closed without Sign out, on a shared computer, for whoever came next. Loaded before
 * operator.js. */
(function () {
  "use strict";
  var PREFIX = "gw-operator-draft:";
  // Drafts were once kept in localStorage, which nothing clears now: one left there (a tab closed without
  // Sign out) would stay on a shared computer for good, so any found is removed as the console loads.
  try {
    Object.keys(localStorage).forEach(function (k) { if (k.indexOf(PREFIX) === 0) localStorage.removeItem(k); });
  } catch (e) { /* none could have been kept */ }

  /** The drafts of the console whose `state` names the operator (`me`) and the escalation shown (`selected`);
   *  what is typed in `box` is kept as the shown escalation's draft. */
  window.GatewayOperatorDrafts = function (state, box) {
    function key(id) { return PREFIX + state.me + ":" + id; }
    // The storage may be refused (a private window's quota, a policy): then a draft lives as long as the page.
    var memory = {};
    function get(id) {
      try { return sessionStorage.getItem(key(id)) || ""; } catch (e) { return memory[key(id)] || ""; }
    }
    function put(id, text) {
      var k = key(id);
      if (text.trim()) memory[k] = text; else delete memory[k];
      try { if (text.trim()) sessionStorage.setItem(k, text); else sessionStorage.removeItem(k); } catch (e) { /* memory only */ }
    }
    /** Forget the draft of escalation `id` once `sent` went: one the operator changed meanwhile stays. */
    function sent(id, text) { if (get(id).trim() === text) put(id, ""); }
    /** Forget every draft of the operator signed in: the next one at this screen must not read them. */
    function clearAll() {
      var mine = PREFIX + state.me + ":";
      memory = {};
      try {
        Object.keys(sessionStorage).forEach(function (k) { if (k.indexOf(mine) === 0) sessionStorage.removeItem(k); });
      } catch (e) { /* nothing was kept */ }
    }
    box.addEventListener("input", function () { if (state.selected !== null) put(state.selected, box.value); });
    return { get: get, put: put, sent: sent, clearAll: clearAll };
  };
})();
