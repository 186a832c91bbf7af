/* The operator console's keys: Enter sends from the reply and note boxes, the arrows move through the
 * escalations, and the boxes' hints describe them only where shown. Loaded before operator.js. */
(function () {
  "use strict";
  function $(id) { return document.getElementById(id); }

  /** Enter in `box` submits `form`, as in every chat; Shift+Enter starts a new line (and Enter that ends an
   *  input method's composition, a Japanese or Chinese word, only ends it). The reply box and the note box
   *  alike: two boxes on one page whose Enter did different things would send a half-written reply. */
  function submitsOnEnter(box, form) {
    $(box).addEventListener("keydown", function (e) {
      // On a touch screen the keyboard's Enter is the only way to a new line: there, the form's button sends.
      var send = e.ctrlKey || e.metaKey || !(e.shiftKey || window.matchMedia("(pointer: coarse)").matches);
      // keyCode 229: that composition's Enter as Safari reports it, with isComposing false.
      if (e.key === "Enter" && send && !e.isComposing && e.keyCode !== 229) {
        e.preventDefault();
        $(form).requestSubmit();
      }
    });
  }

  /** Up and Down move the focus through the escalations' list. */
  function arrowsMoveIn(list) {
    $(list).addEventListener("keydown", function (e) {
      if (e.key !== "ArrowDown" && e.key !== "ArrowUp") return;
      var items = Array.prototype.slice.call(document.querySelectorAll(".op-item"));
      var index = items.indexOf(document.activeElement) + (e.key === "ArrowDown" ? 1 : -1);
      if (items[index]) { e.preventDefault(); items[index].focus(); }
    });
  }

  /** Each box's hint describes it while the hint is shown. */
  function describedByHints(boxes) {
    // On a touch screen the hint is hidden (operator.css: Enter there starts a new line), and a screen reader
    // still read it out as the box's description: only a hint that is shown describes the box.
    var coarse = window.matchMedia("(pointer: coarse)");
    function describeReply() {
      boxes.forEach(function (box) {
        if (coarse.matches) $(box).removeAttribute("aria-describedby");
        else $(box).setAttribute("aria-describedby", box + "-hint");
      });
    }
    describeReply();
    coarse.addEventListener("change", describeReply);
  }

  window.GatewayOperatorKeys = Object.freeze({
    submitsOnEnter: submitsOnEnter, arrowsMoveIn: arrowsMoveIn, describedByHints: describedByHints,
  });
})();
