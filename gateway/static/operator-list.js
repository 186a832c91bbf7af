/* The operator console's list of escalations: reading it, drawing it (each item kept from one drawing to the
 * next), the tab's title, and the way from a resolved escalation to the customer's newer one. Loaded before
 * operator.js, which gives it the console. */
(function () {
  "use strict";

  /** The list over the console `c`: its state and helpers; `c.select` opens an escalation (a click on its item). */
  window.GatewayOperatorList = function (c) {
    var state = c.state, $ = c.$, api = c.api, showError = c.showError, learnNames = c.learnNames;
    var render = window.GatewayOperatorRender, el = render.el, byWait = render.byWait, waiting = render.waiting;

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
      state.counts = body.counts || {};
      drawList(list, body.escalations);
    }

    /** Draw the escalations, keeping each one's button (and its parts) from the last drawing. The list is
     * drawn again on every live event: a new button in the old one's place between the press and the
     * release of a tap or click got no click (the pressed button had left the page), so the escalation the
     * operator picked never opened; a kept button also keeps the keyboard focus. */
    /** What the customer last wrote, quoted, and the files they sent with it: a photo alone read “”. */
    function said(last) {
      var files = render.filesNote(last.attachments);
      return (last.text ? "“" + last.text + "”" : "") + (last.text && files ? " · " : "") + files;
    }

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
        parts[5].textContent = e.last_customer_message ? said(e.last_customer_message) : "";
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
      // In a backlog the API lists the longest waiting alone (`counts` has them all): the title counts every one.
      var openShown = escalations.filter(function (e) { return e.state === "open"; }).length;
      var waitingNow = Math.max(openShown, (state.counts || {}).open || 0);
      var unread = escalations.filter(function (e) { return state.unread[e.id]; }).length;
      var counts = [waitingNow ? waitingNow + " waiting" : "", unread ? unread + " new" : ""].filter(Boolean);
      document.title = (counts.length ? "(" + counts.join(", ") + ") " : "") + "Operator console";
      var more = $("op-list-more"), resolvedShown = escalations.length - openShown - escalations.filter(function (e) {
        return e.state === "claimed"; }).length;
      var left = [waitingNow > openShown ? "the " + openShown + " who have waited longest of " + waitingNow + " waiting" : "",
                  (state.counts || {}).resolved > resolvedShown ? "the newest " + resolvedShown + " of " +
                  state.counts.resolved + " resolved" : ""].filter(Boolean);
      more.textContent = left.length ? "Showing " + left.join(", and ") + "." : "";
      more.hidden = !left.length;
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
      button.addEventListener("click", function () { c.select(id); });
      li.appendChild(button);
      return li;
    }

    return { loadList: loadList, drawList: drawList, showNewer: showNewer };
  };
})();
