/* Rendering for the web chat widget: untrusted text into elements, never through innerHTML.
 *
 * A reply is Markdown. A small subset becomes DOM nodes built here: paragraphs, **bold**, *italic*,
 * _italic_, ~~strike~~, `code`, fenced code, lists, > quotes, [text](url) (its URL may hold one level of
 * parentheses, or be in <angle brackets>) and citation markers [n]; a heading is a bold line, and a table
 * is its rows as "a | b" lines, header bold (as on Telegram). Everything else stays text, and a
 * link is made only when its URL parses as http(s), opened with rel="noopener noreferrer nofollow".
 * Loaded before widget.js, which reads window.GatewayWidgetRender.
 */
(function () {
  "use strict";

  var LINK_REL = "noopener noreferrer nofollow";

  /** The normalized URL when `raw` is an absolute http(s) URL, else null (javascript:, data:, relative…). */
  function safeHttpUrl(raw) {
    if (typeof raw !== "string" || raw.trim() === "") return null;
    var parsed;
    try { parsed = new URL(raw.trim()); } catch (e) { return null; }
    return parsed.protocol === "http:" || parsed.protocol === "https:" ? parsed.href : null;
  }

  function el(tag, className, text) {
    var node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function link(href, className, text) {
    var a = el("a", className, text);
    a.href = href;
    a.target = "_blank";
    a.rel = LINK_REL;
    return a;
  }

  /** Citations as given, with their 1-based numbers (a reply's [n] is the n-th); non-objects dropped. */
  function numberedCitations(citations) {
    if (!Array.isArray(citations)) return [];
    return citations.map(function (c, i) { return { n: i + 1, c: c }; })
      .filter(function (x) { return x.c && typeof x.c === "object"; });
  }

  /** A sources block under `heading` (the bot's, as the server gives it): links for http(s) URLs, plain
   *  text for anything else. */
  function renderCitations(citations, heading) {
    var list = numberedCitations(citations);
    if (!list.length) return null;
    var box = el("div", "gw-sources");
    var label = typeof heading === "string" && heading.trim() ? heading.trim() : "Sources:";
    box.appendChild(el("span", "gw-sources-label", label));
    var ul = el("ul");
    var seen = new Set();
    list.forEach(function (x) {
      var c = x.c;
      var label = String(c.title || c.source || "source");
      var href = safeHttpUrl(c.url);
      var key = (href || "") + "\u0000" + label;
      if (seen.has(key)) return;
      seen.add(key);
      var li = el("li");
      li.dataset.n = String(x.n);
      li.appendChild(el("span", "gw-source-n", x.n));
      var item = href ? link(href, "gw-source", label) : el("span", "gw-source", label);
      if (c.source) item.title = String(c.source);
      li.appendChild(item);
      ul.appendChild(li);
    });
    box.appendChild(ul);
    return box;
  }

  // ---- Markdown: a safe subset, built as DOM nodes; what is not recognised stays text ----
  var LIST_ITEM = /^ {0,3}([-*+]|\d{1,9}[.)])[ \t]+(.*)$/;
  var FENCE = /^ {0,3}(`{3,}|~{3,})/;
  var HEADING = /^ {0,3}#{1,6}[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$/;
  var QUOTE = /^ {0,3}> ?(.*)$/;
  var MAX_QUOTE_DEPTH = 8;  // "> > > …" deeper than this stays text: the nesting is built by recursion
  var TABLE_DELIMITER = /^ {0,3}\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$/;

  /** A table row's cells: split on the pipes that are not escaped, the outer ones dropped. */
  function cells(row) {
    var s = row.trim().replace(/^\|/, "").replace(/(^|[^\\])\|$/, "$1");
    return s.split(/(?<!\\)\|/).map(function (c) { return c.trim().replace(/\\\|/g, "|"); });
  }

  /** The rows of a table as lines of one paragraph, "a | b", the header's cells bold. */
  function renderTable(rows, citations) {
    var p = el("p", "gw-table");
    rows.forEach(function (row, r) {
      if (r) p.appendChild(document.createTextNode("\n"));
      cells(row).forEach(function (cell, c) {
        if (c) p.appendChild(document.createTextNode(" | "));
        var into = p;
        if (r === 0 && cell) { into = el("strong"); p.appendChild(into); }
        appendInline(into, cell, citations);
      });
    });
    return p;
  }

  /** `text` as a fragment of <p>, <ul>/<ol>, <pre><code>; inline marks inside. Never parses HTML. */
  function renderMarkdown(text, citations, depth) {
    depth = depth || 0;
    var frag = document.createDocumentFragment();
    var lines = String(text === null || text === undefined ? "" : text).replace(/\r\n?/g, "\n").split("\n");
    var para = [];
    function flush() {
      if (!para.length) return;
      var p = el("p");
      appendInline(p, para.join("\n"), citations);
      frag.appendChild(p);
      para = [];
    }
    var i = 0;
    while (i < lines.length) {
      var line = lines[i];
      var fence = FENCE.exec(line);
      if (fence) {
        flush();
        var marker = fence[1];
        var body = [];
        i += 1;
        while (i < lines.length) {
          var close = lines[i].trim();
          if (close.length >= marker.length && close.split(marker.charAt(0)).join("") === "") break;
          body.push(lines[i]);
          i += 1;
        }
        i += 1;  // the closing fence (or the end of an unclosed block)
        var pre = el("pre", "gw-code");
        pre.appendChild(el("code", null, body.join("\n")));
        frag.appendChild(pre);
        continue;
      }
      var heading = HEADING.exec(line);
      if (heading && heading[1]) {  // "## Steps": a bold line, not the hashes as typed
        flush();
        var title = el("p");
        var bold = el("strong");
        appendInline(bold, heading[1], citations);
        title.appendChild(bold);
        frag.appendChild(title);
        i += 1;
        continue;
      }
      var next = i + 1 < lines.length ? lines[i + 1] : "";
      if (line.indexOf("|") >= 0 && next.indexOf("|") >= 0 && TABLE_DELIMITER.test(next)) {
        flush();
        var rows = [line];
        i += 2;  // the header and its |---|---| line
        while (i < lines.length && lines[i].trim() && lines[i].indexOf("|") >= 0) { rows.push(lines[i]); i += 1; }
        frag.appendChild(renderTable(rows, citations));
        continue;
      }
      if (QUOTE.test(line) && depth < MAX_QUOTE_DEPTH) {  // "> quote": its lines, rendered inside a <blockquote>
        flush();
        var quoted = [];
        while (i < lines.length && QUOTE.test(lines[i])) { quoted.push(QUOTE.exec(lines[i])[1]); i += 1; }
        var quote = el("blockquote", "gw-quote");
        quote.appendChild(renderMarkdown(quoted.join("\n"), citations, depth + 1));
        frag.appendChild(quote);
        continue;
      }
      var item = LIST_ITEM.exec(line);
      if (item) {
        flush();
        var ordered = /\d/.test(item[1]);
        var list = el(ordered ? "ol" : "ul");
        var start = parseInt(item[1], 10);
        if (ordered && start !== 1 && start < 1e6) list.start = start;
        while (i < lines.length) {
          var m = LIST_ITEM.exec(lines[i]);
          if (m && /\d/.test(m[1]) === ordered) {
            var li = el("li");
            appendInline(li, m[2], citations);
            list.appendChild(li);
          } else if (!m && /^[ \t]{2,}\S/.test(lines[i])) {
            appendInline(list.lastChild, "\n" + lines[i].trim(), citations);  // an item's indented next line
          } else {
            break;
          }
          i += 1;
        }
        frag.appendChild(list);
        continue;
      }
      if (!line.trim()) flush(); else para.push(line);
      i += 1;
    }
    flush();
    return frag;
  }

  // The URL may hold one level of parentheses (https://en.wikipedia.org/wiki/Fee_(banking)), or be in <angle
  // brackets> as CommonMark allows; the alternatives start with different characters, so no backtracking.
  var MD_LINK = /^\[([^\[\]\n]{1,500})\]\((?:<([^<>\n]{1,2000})>|((?:[^()\s]|\([^()\s]{0,2000}\)){1,2000}))\)/;
  var WORD_CHAR = /[\p{L}\p{N}]/u;
  var ESCAPABLE = /[!-\/:-@\[-`{-~]/;  // CommonMark: a backslash before ASCII punctuation makes it plain
  // An HTML entity in a reply ("Q &amp; A") is its character, as in CommonMark (and on Telegram, Slack,
  // Discord, WhatsApp); decoded from this table and numbers, never by an HTML parser. Code keeps it as written.
  var ENTITY = /^&(?:#(\d{1,7})|#[xX]([0-9a-fA-F]{1,6})|([A-Za-z]{2,8}));/;
  var NAMED = {amp: "&", lt: "<", gt: ">", quot: "\"", apos: "'", nbsp: "\u00a0", copy: "\u00a9", reg: "\u00ae",
               trade: "\u2122", hellip: "\u2026", mdash: "\u2014", ndash: "\u2013", euro: "\u20ac", times: "\u00d7",
               laquo: "\u00ab", raquo: "\u00bb", rsquo: "\u2019", lsquo: "\u2018", rdquo: "\u201d", ldquo: "\u201c"};

  /** The character an entity at the start of `rest` names, with its length; null when it is none. */
  function entity(rest) {
    var m = ENTITY.exec(rest);
    if (!m) return null;
    var code = m[1] ? parseInt(m[1], 10) : m[2] ? parseInt(m[2], 16) : -1;
    var ch = code < 0 ? NAMED[m[3]] : code > 0 && code <= 0x10ffff && (code < 0xd800 || code > 0xdfff)
      ? String.fromCodePoint(code) : "\ufffd";
    return ch === undefined ? null : { ch: ch, length: m[0].length };
  }
  var MD_CITE = /^\[(\d{1,3})\](?!\()/;

  /** The `_`s of `root` that can close an _italic_ run (after a non-space, before no letter, digit nor `_`),
   *  found in one pass when first asked: a function giving the first at or after a position, or -1. Looking
   *  through every `_` after each opener took time quadratic in a reply of unmatched ones ("_a _a _a …"). */
  function underscoreCloses(root) {
    var next = null;
    return function (from) {
      if (!next) {
        next = new Int32Array(root.length + 1);
        next[root.length] = -1;
        for (var j = root.length - 1; j >= 0; j--) {
          var closes = root.charAt(j) === "_" && /\S/.test(root.charAt(j - 1))
            && !WORD_CHAR.test(root.charAt(j + 1)) && root.charAt(j + 1) !== "_";
          next[j] = closes ? j : next[j + 1];
        }
      }
      return from < root.length ? next[from] : -1;
    };
  }

  /** The index of the `_` that closes an _italic_ run opened at `open` in `text`, or -1. `text` is the part at
   *  `offset` of the text `closes` was made for: its last `_` may close here and not there (a letter after it). */
  function underscoreEnd(text, open, closes, offset) {
    var last = text.length - 1, end = closes(offset + open + 2) - offset;
    if (end >= open + 2 && end < last) return end;
    return last >= open + 2 && text.charAt(last) === "_" && /\S/.test(text.charAt(last - 1)) ? last : -1;
  }

  /** Inline marks into `parent`: `code`, **bold**, *italic*, _italic_, ~~strike~~, [text](http url), [n].
   *  Text nodes otherwise. A mark's inside is drawn with the `closes` of the whole text and its `offset` there. */
  function appendInline(parent, text, citations, closes, offset) {
    closes = closes || underscoreCloses(text);
    offset = offset || 0;
    var plain = "";
    function flushText() { if (plain) { parent.appendChild(document.createTextNode(plain)); plain = ""; } }
    var i = 0;
    /** "**bold**", "~~strike~~": the run from `i` between two `mark`s as a `tag`, when it neither starts nor
     * ends with a space; else the mark as typed. Moves `i` past what it took. */
    function paired(mark, tag) {
      var from = i + mark.length, close = text.indexOf(mark, from);
      if (close > from && /\S/.test(text.charAt(from)) && /\S/.test(text.charAt(close - 1))) {
        flushText();
        var node = el(tag);
        appendInline(node, text.slice(from, close), citations, closes, offset + from);
        parent.appendChild(node);
        i = close + mark.length;
      } else {
        plain += mark;
        i = from;
      }
    }
    while (i < text.length) {
      var ch = text.charAt(i);
      var rest = ch === "`" || ch === "[" ? text.slice(i) : "";  // only where a pattern is tried
      var end, m;
      if (ch === "`") {
        var ticks = /^`+/.exec(rest)[0];
        end = text.indexOf(ticks, i + ticks.length);
        if (end > i + ticks.length) {
          flushText();
          parent.appendChild(el("code", null, text.slice(i + ticks.length, end)));
          i = end + ticks.length;
          continue;
        }
        plain += ticks;
        i += ticks.length;
        continue;
      }
      if (ch === "*" && text.charAt(i + 1) === "*") {
        paired("**", "strong");
        continue;
      }
      if (ch === "*") {
        end = text.indexOf("*", i + 1);
        if (end > i + 1 && /\S/.test(text.charAt(i + 1)) && /\S/.test(text.charAt(end - 1))
            && text.charAt(end + 1) !== "*") {
          flushText();
          var em = el("em");
          appendInline(em, text.slice(i + 1, end), citations, closes, offset + i + 1);
          parent.appendChild(em);
          i = end + 1;
          continue;
        }
        plain += ch;
        i += 1;
        continue;
      }
      if (ch === "\\" && ESCAPABLE.test(text.charAt(i + 1))) {  // "\*not bold\*": the mark as typed, no backslash
        plain += text.charAt(i + 1);
        i += 2;
        continue;
      }
      if (ch === "&" && (m = entity(text.slice(i, i + 12)))) {
        plain += m.ch;
        i += m.length;
        continue;
      }
      if (ch === "~" && text.charAt(i + 1) === "~") {
        paired("~~", "del");
        continue;
      }
      if (ch === "_" && !WORD_CHAR.test(text.charAt(i - 1)) && /[^\s_]/.test(text.charAt(i + 1))) {
        end = underscoreEnd(text, i, closes, offset);
        if (end > 0) {
          flushText();
          var it = el("em");
          appendInline(it, text.slice(i + 1, end), citations, closes, offset + i + 1);
          parent.appendChild(it);
          i = end + 1;
          continue;
        }
      }
      if (ch === "[") {
        m = MD_LINK.exec(rest);
        var href = m && safeHttpUrl(m[2] !== undefined ? m[2] : m[3]);
        if (href) {
          flushText();
          parent.appendChild(link(href, "gw-link", m[1]));
          i += m[0].length;
          continue;
        }
        if (m) {  // a link to anything but http(s): the whole of it as text
          plain += m[0];
          i += m[0].length;
          continue;
        }
        m = MD_CITE.exec(rest);
        var cited = m && Array.isArray(citations) ? citations[Number(m[1]) - 1] : null;
        if (cited && typeof cited === "object") {
          flushText();
          var sup = el("sup", "gw-cite");
          var url = safeHttpUrl(cited.url);
          var marker = url ? link(url, "gw-cite-link", m[0]) : el("span", null, m[0]);
          marker.title = String(cited.title || cited.source || "source");
          sup.appendChild(marker);
          parent.appendChild(sup);
          i += m[0].length;
          continue;
        }
      }
      plain += ch;
      i += 1;
    }
    flushText();
  }

  window.GatewayWidgetRender = Object.freeze({
    el: el, link: link, safeHttpUrl: safeHttpUrl, renderCitations: renderCitations, renderMarkdown: renderMarkdown,
  });
})();
