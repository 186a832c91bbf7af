/* The operator console's pure renderers: an escalation's message and its times, as elements built with
 * textContent only (never innerHTML). Loaded before operator.js, which reads window.GatewayOperatorRender. */
(function () {
  "use strict";
  var AUTHORS = { contact: "Customer", bot: "Bot", operator: "Operator", system: "Notice" };
  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  /** Open escalations first, the customer who has waited longest on top (the API lists newest first,
   * which sank them to the bottom of a busy list); then the others in the API's order. */
  function byWait(escalations) {
    var open = escalations.filter(function (e) { return e.state === "open"; });
    open.sort(function (a, b) { return Date.parse(waitStart(a)) - Date.parse(waitStart(b)) || a.id - b.id; });
    return open.concat(escalations.filter(function (e) { return e.state !== "open"; }));
  }

  /** When the customer's current wait for a person began: the escalation's opening, or the last release of
   * its claim (counted from the opening, a released escalation looked as if nobody had answered it for hours). */
  function waitStart(e) { return e.waiting_since || e.created_at; }

  /** What the wait's title says: when it began, and why then. */
  function waitTitle(e) {
    if (e.state !== "open") return "";
    var released = waitStart(e) !== e.created_at;
    return (released ? "released " + when(waitStart(e)) + "; " : "") + "escalated " + when(e.created_at);
  }

  /** How long an open escalation's customer has waited for a person: "waiting 1 h 05 min". */
  function waiting(e) {
    if (e.state !== "open") return "";
    var minutes = Math.max(0, Math.floor((Date.now() - Date.parse(waitStart(e))) / 60000));
    if (!minutes) return "waiting <1 min";
    return "waiting " + (minutes < 60 ? minutes + " min" :
      Math.floor(minutes / 60) + " h " + String(minutes % 60).padStart(2, "0") + " min");
  }

  /** A reply stored but not yet sent: queued, being sent, or waiting for a retry after a failed send. */
  function undelivered(m) { return m.direction === "out" && (m.status === "pending" || m.status === "sending"); }

  function renderMessage(m) {
    var li = el("li", "op-msg op-msg--" + m.author);
    li.dataset.id = m.id;
    // A customer's edit of a message of theirs, made while it was handled: marked, with the words it replaces.
    var edit = typeof m.replaces === "string";
    var author = el("span", "op-author", (AUTHORS[m.author] || m.author) + (edit ? " (edited)" : ""));
    if (m.created_at) {
      var written = el("time", "op-time", " · " + when(m.created_at));
      written.dateTime = m.created_at;
      author.appendChild(written);
    }
    li.appendChild(author);
    var said = el("span", "op-text", m.text);
    said.dir = "auto";  // an Arabic or Hebrew message reads right to left
    li.appendChild(said);
    if (edit) li.appendChild(el("span", "op-start op-replaces", "It replaces: \u201c" + m.replaces + "\u201d"));
    var files = filesNote((m.attachments || []).map(function (a) { return a.kind; }));
    if (files) li.appendChild(el("span", "op-start op-files", files));  // a photo alone has no text
    if (m.start_payload) {  // a Telegram deep link's payload (t.me/<bot>?start=order123): where they came from
      li.appendChild(el("span", "op-start", "Opened from a link with start=" + m.start_payload));
    }
    if (m.status === "failed" && m.direction === "out") {
      li.appendChild(el("span", "op-failed", "Not delivered" + (m.error ? ": " + m.error : "")));
    } else if (undelivered(m)) {  // a send that failed for a reason that may pass waits for its retry
      li.appendChild(el("span", "op-pending", m.error ? "Not delivered yet: " + m.error : "Sending…"));
    }
    if (m.citations && m.citations.length) {
      var cites = el("ul", "op-citations");
      m.citations.forEach(function (c, i) {
        cites.appendChild(el("li", null, "[" + (i + 1) + "] " + (c.title || c.source) + (c.url ? " — " + c.url : "")));
      });
      li.appendChild(cites);
    }
    if (m.retrieved && m.retrieved.length) {
      var details = el("details", "op-passages");
      details.appendChild(el("summary", null, "Retrieved passages (" + m.retrieved.length + ")"));
      m.retrieved.forEach(function (p) {
        var block = el("div", "op-passage");
        block.appendChild(el("strong", null, (p.title || p.source) + " "));
        block.appendChild(el("span", null, p.text));
        details.appendChild(block);
      });
      li.appendChild(details);
    }
    if (m.tool_calls && m.tool_calls.length) {
      var tools = el("details", "op-passages op-tools");
      tools.appendChild(el("summary", null, "Tool calls (" + m.tool_calls.length + ")"));
      m.tool_calls.forEach(function (c) {
        var block = el("div", "op-passage");
        block.appendChild(el("strong", null, c.name + " "));
        block.appendChild(el("code", null, JSON.stringify(c.arguments || {})));
        if (c.replayed) {
          // An earlier attempt at this message ran it (the process stopped before the reply was stored).
          block.appendChild(el("em", null, " (run once, by an earlier attempt)"));
        }
        block.appendChild(el("pre", "op-tool-result", JSON.stringify(c.result, null, 2)));
        tools.appendChild(block);
      });
      li.appendChild(tools);
    }
    return li;
  }

  /** The customer's files, named (the gateway keeps only their kinds): "Sent a file (image), not shown here". */
  function filesNote(kinds) {
    if (!kinds || !kinds.length) return "";
    if (kinds.length === 1) return "Sent a file (" + kinds[0] + "), not shown here";
    var distinct = kinds.filter(function (k, i) { return kinds.indexOf(k) === i; });
    return "Sent " + kinds.length + " files (" + distinct.join(", ") + "), not shown here";
  }

  // "2026-12-03T14:31:57.966163+00:00" (the API's UTC) as "2026-12-03 14:31:57 UTC": to the second, zone named.
  function when(iso) {
    return /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?\+00:00$/.test(iso || "") ? iso.slice(0, 19).replace("T", " ") + " UTC" : iso;
  }

  window.GatewayOperatorRender = Object.freeze({
    el: el, byWait: byWait, waiting: waiting, waitTitle: waitTitle, renderMessage: renderMessage, filesNote: filesNote, when: when, undelivered: undelivered,
  });
})();
