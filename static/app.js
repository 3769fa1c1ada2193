// Infinite scroll glue on top of htmx: the reader's place in the address bar, loading both ways
// without moving what the reader sees, a bounded document, the row guard, live announcements,
// busy state, Retry, local times. Everything here is an enhancement: without JavaScript the list
// pages by plain links and forms, and the same URLs open the same places.
(function () {
  "use strict";
  document.documentElement.classList.add("js");
  // We put the reader back ourselves, at the row the address names: the browser's own restore
  // of the old scroll offset would land somewhere else in a document that starts elsewhere.
  if ("scrollRestoration" in history) history.scrollRestoration = "manual";

  var ROWS = "#rows > tr[data-id]";
  var loads = new Map();      // control row (#more / #less) -> the load it started
  var requesting = new Set(); // elements whose list load is under way (aria-busy; no drops)
  var inflight = 0;
  var focusNext = false;      // a "Load more" press moves focus to the first new row

  function table() { return document.getElementById("orders"); }
  function body() { return document.getElementById("rows"); }
  function dataRows() { return document.querySelectorAll(ROWS); }
  function isRow(el) { return el && el.hasAttribute && el.hasAttribute("data-id"); }
  function announce(text) {
    var live = document.getElementById("announcer");
    if (!live) return;
    live.textContent = "";
    // A fresh text node after a tick makes screen readers announce repeated messages too.
    setTimeout(function () { live.textContent = text; }, 50);
  }
  function setBusy() {
    var t = table();
    if (t) t.setAttribute("aria-busy", inflight > 0 ? "true" : "false");
    ["more", "less"].forEach(function (id) {
      var row = document.getElementById(id);
      if (row) row.classList.toggle("is-loading", loads.has(row));
    });
  }
  function controlRow(elt) { return elt && elt.closest ? elt.closest("#more, #less") : null; }

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

  // --- Where the reader is ---------------------------------------------------------------

  // The first row at least partly in view (rows are in document order: binary search).
  function firstVisibleRow() {
    var rows = dataRows(), lo = 0, hi = rows.length - 1, found = null;
    while (lo <= hi) {
      var mid = (lo + hi) >> 1;
      if (rows[mid].getBoundingClientRect().bottom > 1) { found = rows[mid]; hi = mid - 1; } else { lo = mid + 1; }
    }
    return found;
  }

  // Keeps what the reader sees still while rows are added or removed above it. Chromium's CSS
  // scroll anchoring often does this already (then the measured shift is 0); Safari and
  // `overflow-anchor: none` do not, so the shift is measured and scrolled back here.
  function keepInPlace(change) {
    var anchor = firstVisibleRow();
    var before = anchor ? anchor.getBoundingClientRect().top : 0;
    change();
    if (!anchor || !anchor.isConnected) return;
    var shift = anchor.getBoundingClientRect().top - before;
    if (Math.abs(shift) >= 0.5) window.scrollBy(0, shift);
  }

  // The address bar follows the reader: the URL of the page holding the first row in view,
  // plus that row as the fragment. replaceState adds no history entry. htmx keys its history
  // snapshot by the path it last pushed (kept in sessionStorage by htmx 2.0.x), so it is moved
  // along, and Back finds the snapshot under the address it returns to.
  function rememberPlace() {
    var row = firstVisibleRow();
    if (!row) return;
    var start = row;
    while (start && !start.hasAttribute("data-pos")) start = start.previousElementSibling;
    if (!start || !isRow(start)) return;
    var atTop = !document.getElementById("less") && row === dataRows()[0] && row.getBoundingClientRect().top >= 0;
    var url = start.dataset.pos + (atTop ? "" : "#order-" + row.dataset.id);
    if (url === location.pathname + location.search + location.hash) return;
    history.replaceState(history.state, "", url);
    try {
      sessionStorage.setItem("htmx-current-path-for-history", location.pathname + location.search);
    } catch (e) { /* no sessionStorage: htmx keeps no snapshots either */ }
  }
  var placeTimer = null;
  function rememberPlaceSoon() {
    clearTimeout(placeTimer);
    placeTimer = setTimeout(rememberPlace, 150);
  }
  window.addEventListener("scroll", rememberPlaceSoon, { passive: true });

  // Opened at a row (reload, bookmark, shared link, Back without a snapshot): that row on top.
  // Near the end of what is loaded the document may be too short to bring it up yet, so it is
  // brought up again as rows arrive below, until the reader takes over.
  var landing = null;
  function goToNamedRow() {
    var match = /^#order-(\d+)$/.exec(location.hash);
    if (!match) return;
    landing = match[1];
    // Deleted since the address was taken: land on the first row of its page (the rows drawn
    // so far are that page), the nearest place still there.
    var first = document.querySelector(ROWS);
    if (!document.getElementById("order-" + landing) && first) landing = first.dataset.id;
    settleLanding();
  }
  function settleLanding() {
    var row = landing && document.getElementById("order-" + landing);
    if (!row) { landing = null; return; }
    row.scrollIntoView({ block: "start" });
    if (Math.abs(row.getBoundingClientRect().top) <= 1) landing = null;
  }
  ["wheel", "keydown", "touchstart", "pointerdown"].forEach(function (name) {
    window.addEventListener(name, function () { landing = null; }, { passive: true });
  });

  // --- A bounded document ----------------------------------------------------------------

  function maxRows() {
    var t = table();
    return t ? parseInt(t.dataset.maxRows || "0", 10) || 0 : 0;
  }

  // A sentinel row like the server's, for rows this script dropped and may load again.
  function sentinel(up, url) {
    var tr = document.createElement("tr");
    tr.id = up ? "less" : "more";
    tr.className = (up ? "less" : "more") + " sentinel";
    tr.setAttribute("hx-boost", "false");
    var td = document.createElement("td");
    td.colSpan = 5;
    var box = document.createElement("span");
    box.className = up ? "prefetch-up" : "prefetch";
    box.setAttribute("aria-hidden", "true");
    box.setAttribute("hx-get", url);
    box.setAttribute("hx-trigger", "intersect once");
    box.setAttribute("hx-target", "closest tr");
    box.setAttribute("hx-swap", "outerHTML");
    var text = document.createElement("span");
    text.className = "loading";
    text.setAttribute("aria-hidden", "true");
    text.textContent = up ? "Loading earlier orders…" : "Loading more orders…";
    td.appendChild(box);
    td.appendChild(text);
    tr.appendChild(td);
    return tr;
  }

  // The rows of one page as drawn: from a row with data-pos up to the next one.
  function firstGroup() {
    var rows = [], row = document.querySelector(ROWS);
    while (isRow(row) && (rows.length === 0 || !row.hasAttribute("data-pos"))) { rows.push(row); row = row.nextElementSibling; }
    return { rows: rows, next: isRow(row) ? row : null };
  }
  function lastGroup() {
    var all = dataRows(), rows = [], row = all[all.length - 1];
    while (isRow(row)) { rows.unshift(row); if (row.hasAttribute("data-pos")) break; row = row.previousElementSibling; }
    return { rows: rows, prev: rows.length && isRow(rows[0].previousElementSibling) ? rows[0].previousElementSibling : null };
  }

  // Drops whole pages far from the viewport (on the side the reader moves away from) until at
  // most MAX_ROWS_IN_PAGE rows remain, and leaves a sentinel that loads them again by cursor.
  // Pages are dropped whole because a page's first and last rows carry the URLs of its
  // neighbours. Nothing is dropped while a load is under way: its rows land next to an edge.
  function trim(movingUp) {
    var max = maxRows();
    if (!max || inflight > 0) return;
    // Beyond the 800 px the sentinels reach ahead (app.css), or the sentinel left in place of the
    // dropped rows would load them straight back and the two ends would take turns.
    var margin = window.innerHeight + 1200;
    keepInPlace(function () {
      var count = dataRows().length;
      while (count > max) {
        if (!movingUp) {
          var top = firstGroup();
          if (!top.next || !top.next.dataset.before) break;
          if (top.rows[top.rows.length - 1].getBoundingClientRect().bottom > -margin) break;
          var less = document.getElementById("less");
          if (less) less.remove();
          top.rows.forEach(function (r) { r.remove(); });
          var up = sentinel(true, top.next.dataset.before);
          body().insertBefore(up, top.next);
          htmx.process(up);
          count -= top.rows.length;
        } else {
          var bottom = lastGroup();
          if (!bottom.prev || !bottom.prev.dataset.after) break;
          if (bottom.rows[0].getBoundingClientRect().top < window.innerHeight + margin) break;
          ["more", "end-of-list"].forEach(function (id) {
            var el = document.getElementById(id);
            if (el) el.remove();
          });
          bottom.rows.forEach(function (r) { r.remove(); });
          var down = sentinel(false, bottom.prev.dataset.after);
          body().appendChild(down);
          htmx.process(down);
          count -= bottom.rows.length;
        }
      }
    });
  }

  // --- Loads ---------------------------------------------------------------------------------

  // Row guard: a fragment that arrives twice (a retry after a lost response, a re-fired
  // sentinel after history restore) must not show a row twice.
  function dropDuplicates(rows) {
    var seen = new Set();
    dataRows().forEach(function (r) {
      if (rows.indexOf(r) < 0) seen.add(r.dataset.id);
    });
    return rows.filter(function (r) {
      if (seen.has(r.dataset.id)) { r.remove(); return false; }
      seen.add(r.dataset.id);
      return true;
    });
  }

  function newRows(load) {
    var rows = [], row;
    if (load.up) {
      row = load.edge ? load.edge.previousElementSibling : body().lastElementChild;
      while (isRow(row)) { rows.unshift(row); row = row.previousElementSibling; }
    } else {
      row = load.edge ? load.edge.nextElementSibling : body().firstElementChild;
      while (row) { if (isRow(row)) rows.push(row); row = row.nextElementSibling; }
    }
    return rows;
  }

  // Enter and Space on the button both arrive as a click, before htmx sends the form. (Not on
  // submit: that bubbles here after htmx started the request, and would hand the focus to the
  // next automatic load instead.)
  document.addEventListener("click", function (evt) {
    if (evt.target.closest && evt.target.closest("[data-load-more]")) focusNext = true;
  });

  document.addEventListener("htmx:beforeRequest", function (evt) {
    var row = controlRow(evt.detail.elt);
    if (!row) return;
    var rows = dataRows();
    var up = row.id === "less";
    loads.set(row, { up: up, edge: up ? rows[0] : rows[rows.length - 1], focus: !up && focusNext, elt: evt.detail.elt });
    focusNext = false;
    requesting.add(evt.detail.elt);
    inflight = requesting.size;
    setBusy();
  });
  function done(elt) {
    requesting.delete(elt);
    inflight = requesting.size;
    setBusy();
  }
  // For answers that were not swapped; a swapped sentinel is detached by then and its event
  // does not reach the document, so afterSwap and showRetry end their loads themselves.
  document.addEventListener("htmx:afterRequest", function (evt) { done(evt.detail.elt); });

  var anchorBeforeSwap = null;
  document.addEventListener("htmx:beforeSwap", function (evt) {
    var detail = evt.detail;
    // A boosted click on an order deleted since the list was drawn: show the server's
    // "no longer exists" page (htmx leaves 4xx answers unswapped, which looked like nothing).
    if (detail.boosted && detail.xhr.status === 404) {
      detail.shouldSwap = true;
      detail.isError = false;
      return;
    }
    if (loads.has(detail.target) && detail.shouldSwap) {
      var anchor = firstVisibleRow();
      anchorBeforeSwap = anchor && { row: anchor, top: anchor.getBoundingClientRect().top };
    }
  });

  document.addEventListener("htmx:afterSwap", function (evt) {
    var load = loads.get(evt.detail.target);
    if (!load) return;
    loads.delete(evt.detail.target);
    done(load.elt);
    var anchor = anchorBeforeSwap;
    anchorBeforeSwap = null;
    if (anchor && anchor.row.isConnected) {
      var shift = anchor.row.getBoundingClientRect().top - anchor.top;
      if (Math.abs(shift) >= 0.5) window.scrollBy(0, shift);
    }
    if (landing && !load.up) settleLanding();
    var rows = dropDuplicates(newRows(load));
    rows.forEach(localizeTimes);
    var message = rows.length + (load.up ? " earlier" : " more") + " orders loaded.";
    if (!load.up && !document.getElementById("more") && document.getElementById("end-of-list")) {
      message += " End of orders.";
    }
    announce(message);
    if (load.focus && rows.length) rows[0].focus({ preventScroll: false });
    // After htmx has finished with this response.
    setTimeout(function () { trim(load.up); rememberPlaceSoon(); }, 0);
  });

  // A failed load leaves a Retry row (the server's _error_row.html, or the same row kept in a
  // <template> when no answer came back) that asks for the same rows again.
  function showRetry(evt) {
    var row = controlRow(evt.detail.elt);
    if (!row) return;
    var load = loads.get(row);
    loads.delete(row);
    done(evt.detail.elt);
    var url = (evt.detail.pathInfo && evt.detail.pathInfo.finalRequestPath) ||
      (evt.detail.requestConfig && evt.detail.requestConfig.path) || row.dataset.url;
    var xhr = evt.detail.xhr;
    var holder = document.createElement("tbody");
    if (xhr && xhr.status >= 400 && /^\s*(<!--.*?-->\s*)?<tr[\s>]/.test(xhr.responseText || "") &&
        /class="[^"]*error-row/.test(xhr.responseText)) {
      holder.innerHTML = xhr.responseText;  // our own server's escaped template
    }
    var retry = holder.querySelector("tr.error-row");
    if (!retry) retry = document.getElementById("retry-row").content.querySelector("tr").cloneNode(true);
    retry.id = row.id;
    retry.dataset.url = url;
    retry.querySelector("[data-retry]").addEventListener("click", function () {
      focusNext = !(load && load.up);
      htmx.ajax("GET", url, { source: retry, target: retry, swap: "outerHTML" });
    });
    row.replaceWith(retry);
    setBusy();
    announce("Couldn't load more orders. Retry is available.");
  }
  document.addEventListener("htmx:responseError", showRetry);
  document.addEventListener("htmx:sendError", showRetry);
  document.addEventListener("htmx:timeout", showRetry);

  // Rows that came by any other way (htmx.ajax from elsewhere) pass the same guard.
  htmx.onLoad(function (elt) {
    if (isRow(elt) && elt.parentElement === body() && dropDuplicates([elt]).length === 0) return;
    localizeTimes(elt.querySelectorAll ? elt : document);
  });

  // Back without a snapshot: htmx fetched the page again (a full page, at the address's
  // position); put the named row on top. With a snapshot htmx restores the old scroll itself.
  document.addEventListener("htmx:historyRestore", function (evt) {
    loads.clear();
    requesting.clear();
    inflight = 0;
    if (evt.detail && evt.detail.cacheMiss) goToNamedRow();
  });

  // "Go to" a date and time: the list shows times in the reader's zone, so the server is told
  // the zone's offset at that date (without JavaScript, both are UTC).
  document.addEventListener("submit", function (evt) {
    var form = evt.target;
    if (!form.matches || !form.matches("form.jump")) return;
    var when = form.querySelector('input[type="datetime-local"]');
    var old = form.querySelector('input[name="tz"]');
    if (old) old.remove();
    if (!when || !when.value) return;
    var tz = document.createElement("input");
    tz.type = "hidden";
    tz.name = "tz";
    tz.value = String(new Date(when.value).getTimezoneOffset());
    form.appendChild(tz);
  });

  // Sort and status apply as soon as they change (the Apply button stays for keyboards).
  document.addEventListener("change", function (evt) {
    var form = evt.target.closest && evt.target.closest("form.controls");
    if (form) form.requestSubmit();
  });

  goToNamedRow();
})();
