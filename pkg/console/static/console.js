// Live refresh for the OJS console: a page part marked
//   <div data-live="URL" data-interval="ms" data-final="true|false">
// is re-fetched every interval (with the header X-Console-Fragment, which
// makes the server answer the page content only) and #content is replaced
// with the answer, until the part says data-final="true" (a finished
// workflow). No framework, no build step.
(function () {
  "use strict";
  var busy = false;
  function live() { return document.querySelector("[data-live]"); }
  function tick() {
    var el = live();
    if (!el || el.getAttribute("data-final") === "true" || busy) { return; }
    busy = true;
    fetch(el.getAttribute("data-live"), { headers: { "X-Console-Fragment": "1" }, credentials: "same-origin", cache: "no-store" })
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (html) {
        var content = document.getElementById("content");
        // Keep open <details> open across refreshes.
        var open = Array.prototype.map.call(content.querySelectorAll("details[open] summary"), function (s) { return s.textContent; });
        content.innerHTML = html;
        Array.prototype.forEach.call(content.querySelectorAll("details summary"), function (s) {
          if (open.indexOf(s.textContent) >= 0) { s.parentNode.open = true; }
        });
        document.documentElement.setAttribute("data-refreshed", String(Date.now()));
      })
      .catch(function () { /* try again on the next tick */ })
      .then(function () { busy = false; schedule(); });
  }
  function schedule() {
    var el = live();
    if (!el || el.getAttribute("data-final") === "true") { return; }
    var ms = parseInt(el.getAttribute("data-interval"), 10) || 2000;
    setTimeout(tick, ms);
  }
  document.addEventListener("DOMContentLoaded", schedule);
  // Confirm destructive actions.
  document.addEventListener("submit", function (e) {
    var b = e.target.querySelector("button.danger");
    if (b && !window.confirm(b.textContent.trim() + "? This cannot be undone.")) { e.preventDefault(); }
  });
})();
