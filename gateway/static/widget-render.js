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
  // Marks nested deeper than this stay text: a browser checks an element's ancestors as a child joins it, so
  // each level costs more (20,000 nested _italic_ runs took seconds), and no reply means one this deep.
  var MAX_INLINE_DEPTH = 1000;

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

  /** The backtick runs of `root`, found in one pass when first asked: a function giving the start of the first run
   *  of `count` backticks or more after the run that holds `at` (a code span's close), or -1. Searching the text for
   *  each opener took time n^1.5 in a reply of ever shorter unmatched runs ("````` ```` ``` …"). */
  function backtickCloses(root) {
    var runOf = null, starts = [], lengths = [], longer = [];
    function scan() {
      runOf = new Int32Array(root.length);
      for (var j = 0; j < root.length; j++) {
        if (root.charCodeAt(j) !== 96) continue;  // 96: "`"
        if (j === 0 || root.charCodeAt(j - 1) !== 96) { starts.push(j); lengths.push(0); }
        runOf[j] = starts.length - 1;
        lengths[starts.length - 1] += 1;
      }
      var stack = [];  // longer[r]: the first run after r that is longer than it
      for (var r = starts.length - 1; r >= 0; r--) {
        while (stack.length && lengths[stack[stack.length - 1]] <= lengths[r]) stack.pop();
        longer[r] = stack.length ? stack[stack.length - 1] : starts.length;
        stack.push(r);
      }
    }
    return function (at, count) {
      if (!runOf) scan();
      var r = runOf[at] + 1;
      // Each jump is to a longer run shorter than `count`: fewer jumps than the opener's backticks, drawn next.
      while (r < starts.length && lengths[r] < count) r = longer[r];
      return r < starts.length ? starts[r] : -1;
    };
  }

  /** Inline marks into `parent`: `code`, **bold**, *italic*, _italic_, ~~strike~~, [text](http url), [n]; text
   *  nodes otherwise. A mark is drawn over its range of `text` (`start`, `end`; it sees nothing outside: `at`); the
   *  marks around it wait on a stack, not the call stack, which thousands of nested _italic_ runs overflowed. */
  function appendInline(parent, text, citations) {
    var underscoreNext = underscoreCloses(text), backtickNext = backtickCloses(text);
    var node = parent, start = 0, end = text.length, after = end, outer = [], plain = "", i = 0, ch, to, m;
    function at(j) { return j >= start && j < end ? text.charAt(j) : ""; }
    function flushText() { if (plain) { node.appendChild(document.createTextNode(plain)); plain = ""; } }
    /** Draws `text` from `from` to `to` inside a new `tag`, then goes on at `resume` in the range around it. */
    function open(tag, from, to, resume) {
      flushText();
      outer.push({ node: node, start: start, end: end, after: after });
      node = el(tag); start = i = from; end = to; after = resume;
    }
    /** Where `size` characters found at `found` (an index, or -1) lie inside the range drawn, else -1. */
    function within(found, size) { return found >= 0 && found + size <= end ? found : -1; }
    function nests() { return outer.length < MAX_INLINE_DEPTH; }
    /** "**bold**", "~~strike~~": from `i`, between two `mark`s as a `tag` (no space inside either end); else text. */
    function paired(mark, tag) {
      var from = i + mark.length, close = within(text.indexOf(mark, from), mark.length);
      var ok = close > from && nests() && /\S/.test(at(from)) && /\S/.test(at(close - 1));
      if (ok) open(tag, from, close, close + mark.length);
      else { plain += mark; i = from; }
    }
    /** The index of the `_` that closes an _italic_ run opened at `i`, or -1: the first that can close one in
     *  the whole text, or else the last of the range (a letter after it may keep it from closing one there). */
    function underscoreEnd() {
      var last = end - 1, close = underscoreNext(i + 2);
      if (close >= i + 2 && close < last) return close;
      return last >= i + 2 && at(last) === "_" && /\S/.test(at(last - 1)) ? last : -1;
    }
    for (;;) {
      if (i >= end) {
        flushText();
        if (!outer.length) break;
        i = after;
        var around = outer.pop();
        around.node.appendChild(node);  // drawn whole, the mark joins the one around it
        node = around.node; start = around.start; end = around.end; after = around.after;
        continue;
      }
      ch = text.charAt(i);
      if (ch === "`") {
        var count = 1;
        while (at(i + count) === "`") count += 1;
        to = within(backtickNext(i, count), count);
        if (to > i + count) {
          flushText();
          node.appendChild(el("code", null, text.slice(i + count, to)));
          i = to + count;
          continue;
        }
        plain += text.slice(i, i + count);  // no close: the run as typed
        i += count;
        continue;
      }
      if (ch === "*" && at(i + 1) === "*") {
        paired("**", "strong");
        continue;
      }
      if (ch === "*") {
        to = within(text.indexOf("*", i + 1), 1);
        if (to > i + 1 && nests() && /\S/.test(at(i + 1)) && /\S/.test(at(to - 1)) && at(to + 1) !== "*") {
          open("em", i + 1, to, to + 1);
          continue;
        }
        plain += ch;
        i += 1;
        continue;
      }
      if (ch === "\\" && ESCAPABLE.test(at(i + 1))) {  // "\*not bold\*": the mark as typed, no backslash
        plain += at(i + 1);
        i += 2;
        continue;
      }
      if (ch === "&" && (m = entity(text.slice(i, Math.min(i + 12, end))))) {
        plain += m.ch;
        i += m.length;
        continue;
      }
      if (ch === "~" && at(i + 1) === "~") {
        paired("~~", "del");
        continue;
      }
      if (ch === "_" && !WORD_CHAR.test(at(i - 1)) && /[^\s_]/.test(at(i + 1)) && nests()) {
        to = underscoreEnd();
        if (to >= 0) {
          open("em", i + 1, to, to + 1);
          continue;
        }
      }
      if (ch === "[") {
        var rest = text.slice(i, end);  // only where a pattern is tried
        m = MD_LINK.exec(rest);
        var href = m && safeHttpUrl(m[2] !== undefined ? m[2] : m[3]);
        if (href) {
          flushText();
          node.appendChild(link(href, "gw-link", m[1]));
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
          node.appendChild(sup);
          i += m[0].length;
          continue;
        }
      }
      plain += ch;
      i += 1;
    }
  }

  window.GatewayWidgetRender = Object.freeze({
    el: el, link: link, safeHttpUrl: safeHttpUrl, renderCitations: renderCitations, renderMarkdown: renderMarkdown,
  });
})();
