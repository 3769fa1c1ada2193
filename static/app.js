// Infinite scroll glue on top of htmx: row guard, live announcements, busy state, Retry, local times.
// Everything here is an enhancement: without JavaScript the list pages by plain links.
(function () {
  "use strict";
  document.documentElement.classList.add("js");

  var rowsBefore = null;      // rows in the list when the current load started
  var focusAfterLoad = false; // a "Load more" click moves focus to the first new row

  function table() { return document.getElementById("orders"); }
  function dataRows() { return document.querySelectorAll("#rows > tr[data-id]"); }
  function announce(text) {
    var live = document.getElementById("announcer");
    if (!live) return;
    live.textContent = "";
    // A fresh text node after a tick makes screen readers announce repeated messages too.
    setTimeout(function () { live.textContent = text; }, 50);
  }
  function setBusy(busy) {
    var t = table();
    if (t) t.setAttribute("aria-busy", busy ? "true" : "false");
    var more = document.getElementById("more");
    if (more) more.classList.toggle("is-loading", busy);
  }
  function moreRow(elt) { return elt && elt.closest ? elt.closest("#more") : null; }

  var timeFormat = new Intl.DateTimeFormat(undefined, {
    year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit"
  });
  function localizeTimes(root) {
    root.querySelectorAll("time[datetime]").forEach(function (el) {
      if (el.dataset.localized) return;
      var when = new Date(el.getAttribute("datetime"));
      if (isNaN(when)) return;
      el.title = el.textContent;
      el.textContent = timeFormat.format(when);
      el.dataset.localized = "1";
    });
  }

  // Row guard: a fragment that arrives twice (a retry after a lost response, a re-fired
  // sentinel after history restore) must not show a row twice.
  function dropDuplicate(row) {
    var id = row.getAttribute("data-id");
    var same = document.querySelectorAll('#rows > tr[data-id="' + CSS.escape(id) + '"]');
    if (same.length > 1 && same[0] !== row) { row.remove(); return true; }
    return false;
  }

  function loaded(control) {
    setBusy(false);
    var rows = dataRows();
    var added = rowsBefore === null ? 0 : Math.max(rows.length - rowsBefore, 0);
    var message = rowsBefore === null ? "" : added + " more orders loaded.";
    if (control.id === "end-of-list") message = (message + " End of orders.").trim();
    if (message) announce(message);
    if (focusAfterLoad && added > 0) rows[rowsBefore].focus();
    rowsBefore = null;
    focusAfterLoad = false;
  }

  htmx.onLoad(function (elt) {
    if (elt.matches && elt.matches("#rows > tr[data-id]") && dropDuplicate(elt)) return;
    localizeTimes(elt.querySelectorAll ? elt : document);
    if (elt.id === "more" || elt.id === "end-of-list") loaded(elt);
  });

  document.addEventListener("click", function (evt) {
    if (evt.target.closest && evt.target.closest("[data-load-more]")) focusAfterLoad = true;
  });

  document.addEventListener("htmx:beforeRequest", function (evt) {
    if (!moreRow(evt.detail.elt)) return;
    rowsBefore = dataRows().length;
    setBusy(true);
  });

  // A failed fragment request leaves a Retry row that asks for the same cursor again.
  function showRetry(evt) {
    var row = moreRow(evt.detail.elt);
    if (!row) return;
    var url = evt.detail.requestConfig ? evt.detail.requestConfig.path : null;
    url = url || row.dataset.url;
    setBusy(false);
    rowsBefore = null;
    row.dataset.url = url;
    row.className = "more retry";
    var cell = document.createElement("td");
    cell.colSpan = 5;
    var text = document.createElement("span");
    text.textContent = "Couldn't load more orders. ";
    var button = document.createElement("button");
    button.type = "button";
    button.className = "button";
    button.textContent = "Retry";
    button.addEventListener("click", function () {
      rowsBefore = dataRows().length;
      focusAfterLoad = true;
      setBusy(true);
      htmx.ajax("GET", url, { source: row, target: row, swap: "outerHTML" });
    });
    cell.appendChild(text);
    cell.appendChild(button);
    row.replaceChildren(cell);
    announce("Couldn't load more orders. Retry is available.");
  }
  document.addEventListener("htmx:responseError", showRetry);
  document.addEventListener("htmx:sendError", showRetry);
  document.addEventListener("htmx:timeout", showRetry);

  // Sort and status apply as soon as they change (the Apply button stays for keyboards).
  document.addEventListener("change", function (evt) {
    var form = evt.target.closest && evt.target.closest("form.controls");
    if (form) form.requestSubmit();
  });
})();
