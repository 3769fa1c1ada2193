// The scroll window: the rows kept in the document while the reader scrolls both ways.
//
//   loads       pages arrive above (#less) and below (#more) as their sentinels come near
//   drops       whole pages far from the reader go, so at most MAX_ROWS_IN_PAGE rows remain,
//               and a sentinel (cloned from orders.html's <template>) loads them again
//   the place   what the reader sees does not move when rows arrive or go above it, nor when
//               the window is resized; a row named by the address is brought to the top
//   the address the URL of the page holding the first row in view, plus that row
//
// The rows of a page are fetched by this module (its own intersection observer and fetch, not
// htmx's request cycle) and go in by it (one replaceWith of a parsed fragment), not by htmx's
// swap; far pages go in the same task, just before them, so one frame lays out and paints both.
// Layout is read only where rows go in or out above the reader's place: once before the writes
// (the layout the last frame drew), once after them all, never read-after-write in a loop.
// docs/scroll.md has the measurements.
//
// The API for other parts of the page (window.ordersList, also this module's exports):
//   open(url, {row, push = true, focus = false}) -> Promise<{row, url}>
//       Shows the list at `url` (any list URL, also a redirecting one such as "go to") in place
//       of the rows shown now, in one request, keeping the rest of the page (toolbar, focus);
//       puts `row` (an order id; default: the row the URL names, else its first row) at the top
//       of the list area and keeps it there while rows load around it; the address names it
//       (a new history entry unless push is false). Rejects with an Error (.status, .message
//       from the server's page) when the server refuses the URL; the list is then unchanged.
//   land(id, top = 0)   puts row `id` at the top of the list area (`top` px from it, 0 or less:
//                       partly under it) and keeps it there while rows load, until the reader
//                       scrolls
//   busy()              true while a load of rows is in flight
//   firstVisibleRow()   the <tr> of the first row in view
//   refresh()           re-reads the list area's top inset after sticky controls changed height
//   holdBelow()         the rows below stop loading by themselves until the reader scrolls on
//                       (the footer was asked for: rows must not arrive above it and push it away)
// "The top of the list area" is the rows' scroll-margin-top (dom.js listTop(); 0 unless sticky
// controls set it).
// Events on document: "orders:loaded" {rows, up}, "orders:place" {row, url} when the first row in
// view or the address changes, "orders:opened" {row, url} after open().
import {
  ROWS, announce, body, dataRows, firstRow, fromTemplate, isRow, lastRow, listTop, requestedPath, table
} from "./dom.js";

var loads = new Map();        // control row (#more / #less) -> the load it started
var requesting = new Set();   // elements whose list load is under way (aria-busy; no drops)
var focusNext = false;        // a "Load more" press moves focus to the first new row
var rowHooks = [];            // run on rows new to the document, before layout is read
var guarded = new WeakSet();  // rows that already passed the row guard
var opened = false;           // open() made history entries of its own

// Other parts of the page change new rows here (local times), inside the window's write phase.
export function onNewRows(fn) { rowHooks.push(fn); }
function runHooks(root) { rowHooks.forEach(function (fn) { fn(root); }); }

export function busy() { return requesting.size > 0; }

function setBusy() {
  var t = table();
  if (t) t.setAttribute("aria-busy", busy() ? "true" : "false");
  ["more", "less"].forEach(function (id) {
    var row = document.getElementById(id);
    if (row) row.classList.toggle("is-loading", loads.has(row));
  });
}
function controlRow(elt) { return elt && elt.closest ? elt.closest("#more, #less") : null; }

// --- Where the reader is -------------------------------------------------------------------

var insetPx = null;
function inset() {
  if (insetPx === null) insetPx = listTop();
  return insetPx;
}
export function refresh() { insetPx = null; }

// The first row at least partly in view (rows are in document order: binary search).
export function firstVisibleRow() {
  var rows = dataRows(), lo = 0, hi = rows.length - 1, found = null, edge = inset() + 1;
  while (lo <= hi) {
    var mid = (lo + hi) >> 1;
    if (rows[mid].getBoundingClientRect().bottom > edge) { found = rows[mid]; hi = mid - 1; } else { lo = mid + 1; }
  }
  return found;
}

function anchorNow() {
  var row = firstVisibleRow();
  return row && { row: row, top: row.getBoundingClientRect().top };
}
// One read after all the writes: scroll back by what the anchor moved. Chromium's CSS scroll
// anchoring often did it already (then the shift is 0); Safari and `overflow-anchor: none` not.
function restore(anchor) {
  if (!anchor || !anchor.row.isConnected) return;
  var shift = anchor.row.getBoundingClientRect().top - anchor.top;
  if (Math.abs(shift) >= 0.5) window.scrollBy(0, shift);
}

// The place as the reader last saw it, for a resize (the old layout is gone by then). While the
// reader scrolls (their input: a wheel, a key, a finger, the scrollbar) it is noted only when the
// scroll comes to rest (rememberPlace, below), not in every frame of it; a resize meanwhile is
// left to the browser's scroll anchoring rather than jumping back to where the reader was when
// the place was noted. Other scrolls (a script's: the sticky bar's height kept, a landing, a
// resize's restore) note it in the next frame, as every scroll did before.
var place = null;
var placeFrame = 0;
var scrolledSince = false;  // the reader's input since the place was noted
function notePlaceSoon() {
  if (!placeFrame) placeFrame = requestAnimationFrame(function () { placeFrame = 0; place = anchorNow(); scrolledSince = false; });
}

// The address bar follows the reader: the URL of the page holding the first row in view, plus
// that row as the fragment. replaceState adds no history entry. htmx keys its history snapshot
// by the path it last pushed (kept in sessionStorage by htmx 2.0.x), so it is moved along, and
// Back finds the snapshot under the address it returns to.
function here() { return location.pathname + location.search + location.hash; }
function setAddress(url, push) {
  if (push) history.pushState({ ordersList: true }, "", url);
  else if (url !== here()) history.replaceState(history.state, "", url);
  try {
    sessionStorage.setItem("htmx-current-path-for-history", location.pathname + location.search);
  } catch (e) { /* no sessionStorage: htmx keeps no snapshots either */ }
}
function addressOf(row, top) {
  var start = row;
  while (start && !start.hasAttribute("data-pos")) start = start.previousElementSibling;
  if (!isRow(start)) return null;
  var atTop = !document.getElementById("less") && row === firstRow() && top >= inset();
  return start.dataset.pos + (atTop ? "" : "#order-" + row.dataset.id);
}
var shownRow = null;
function rememberPlace() {
  place = anchorNow();
  scrolledSince = false;
  if (!place) return;
  var url = addressOf(place.row, place.top);
  if (!url) return;
  var changed = url !== here();
  if (changed) setAddress(url, false);
  keepRowTop(place.top);
  if (changed || place.row !== shownRow) {
    shownRow = place.row;
    document.dispatchEvent(new CustomEvent("orders:place", { detail: { row: place.row, url: url } }));
  }
}
var placeTimer = null;
function rememberPlaceSoon() {
  clearTimeout(placeTimer);
  placeTimer = setTimeout(rememberPlace, 150);
}
window.addEventListener("scroll", function () {
  if (!scrolledSince) notePlaceSoon();
  rememberPlaceSoon();
}, { passive: true });
// Leaving (a click on a link or button, a reload): the address must name the place now, not in
// 150 ms; Back comes back to it (there is no snapshot: it is the only record of the place).
function flushPlace() { clearTimeout(placeTimer); rememberPlace(); }
document.addEventListener("click", function (evt) {
  if (evt.target.closest && evt.target.closest("a[href], button") && table()) flushPlace();
}, true);
window.addEventListener("pagehide", function () { if (table()) flushPlace(); });

// A resize or rotation reflows every row (cards below 52rem): the row that was first in view
// goes back where it was, and the address (which names it) stays true.
window.addEventListener("resize", function () {
  insetPx = null;
  if (landing) { settleLanding(); return; }
  restore(place && !scrolledSince && place.row.isConnected ? place : null);
  rememberPlaceSoon();
});

// Opened at a row (reload, bookmark, shared link, Back without a snapshot, open()): that row on
// top. Near the end of what is loaded the document may be too short to bring it up yet, so it
// is brought up again as rows arrive below, until the reader takes over.
var landing = null;
var landingTop = 0;  // px from the list's top to the landed row's top (<= 0: partly under it)
export function land(id, top) {
  landing = id == null ? null : String(id);
  landingTop = top || 0;
  settleLanding();
}
function settleLanding() {
  var row = landing && document.getElementById("order-" + landing);
  if (!row) { landing = null; return; }
  row.scrollIntoView({ block: "start" });  // honours the row's scroll-margin-top (the list's top)
  // Partly under the list's top, as the reader left it: never so far that none of it shows.
  var top = Math.max(landingTop, 1 - row.getBoundingClientRect().height);
  if (top) window.scrollBy(0, -top);
  if (Math.abs(row.getBoundingClientRect().top - inset() - top) <= 1) landing = null;
}
// The first row in view is often partly under the list's top (the sticky headers): how far is
// kept per address for this tab (sessionStorage; htmx replaces history.state when a link is
// followed), so that Back and reload put the named row where the reader left it, not a fraction
// of a row lower (1280x800: 14-25 px, and a focused row at the bottom of the screen then cut off).
var ROW_TOPS = "orders-row-tops";  // {address: px}, the 20 latest
function keepRowTop(top) {
  var px = Math.round(Math.min(0, top - inset())), url = here();
  try {
    var tops = JSON.parse(sessionStorage.getItem(ROW_TOPS) || "{}");
    if (tops[url] === px) return;
    delete tops[url];
    tops[url] = px;  // the latest last
    Object.keys(tops).slice(0, -20).forEach(function (old) { delete tops[old]; });
    sessionStorage.setItem(ROW_TOPS, JSON.stringify(tops));
  } catch (e) { /* no sessionStorage: the row lands at the list's top, as without it */ }
}
function keptRowTop() {
  try {
    var px = JSON.parse(sessionStorage.getItem(ROW_TOPS) || "{}")[here()];
    return typeof px === "number" && px < 0 ? px : 0;
  } catch (e) { return 0; }
}
function goToNamedRow() {
  var match = /^#order-(\d+)$/.exec(location.hash);
  var first = firstRow();
  // A list opened mid-way without a row named ("go to", a page's own URL): its first row, the
  // one the URL starts at, goes on top, under the rows that load above it.
  if (!match) { if (first && document.getElementById("less")) land(first.dataset.id); return; }
  // Deleted since the address was taken: land on the first row of its page (the rows drawn
  // so far are that page), the nearest place still there.
  if (document.getElementById("order-" + match[1]) || !first) land(match[1], keptRowTop());
  else land(first.dataset.id);
}
["wheel", "keydown", "touchstart", "pointerdown"].forEach(function (name) {
  window.addEventListener(name, function () { landing = null; scrolledSince = true; }, { passive: true });
});

// --- A bounded document --------------------------------------------------------------------

function maxRows() {
  var t = table();
  return t ? parseInt(t.dataset.maxRows || "0", 10) || 0 : 0;
}

// A sentinel row like the server's (its own markup, from orders.html's <template>).
function sentinel(up, url) {
  var row = fromTemplate(up ? "less-row" : "more-row");
  row.querySelector("[data-get]").setAttribute("data-get", url);
  row.querySelector("a").setAttribute("href", url);
  return row;
}

// The rows in pages as drawn: each page from a row with data-pos up to the next one.
function pages(rows) {
  var out = [];
  rows.forEach(function (row) {
    if (!out.length || row.hasAttribute("data-pos")) out.push([]);
    out[out.length - 1].push(row);
  });
  return out;
}

// Reads only. Which whole pages, far from the viewport on the side the reader moves away from,
// to drop so that at most MAX_ROWS_IN_PAGE rows remain once `incoming` more have arrived.
// Pages go whole because a page's first and last rows carry the URLs of its neighbours; only
// beyond the 800 px the sentinels reach (app.css), or the sentinel left in their place would
// load them straight back and the two ends would take turns.
function planDrops(movingUp, incoming) {
  var max = maxRows();
  var rows = dataRows();
  var excess = rows.length + incoming - max;
  if (!max || excess <= 0) return null;
  var groups = pages(rows), margin = window.innerHeight + 1200, dropped = 0, i, g;
  if (!movingUp) {
    for (i = 0; i < groups.length - 1 && dropped < excess; i++) {
      g = groups[i];
      if (!groups[i + 1][0].dataset.before) break;
      if (g[g.length - 1].getBoundingClientRect().bottom > -margin) break;
      dropped += g.length;
    }
    if (!i) return null;
    return { up: false, from: groups[0][0], to: groups[i - 1][groups[i - 1].length - 1], keep: groups[i][0],
      url: groups[i][0].dataset.before };
  }
  for (i = groups.length - 1; i > 0 && dropped < excess; i--) {
    g = groups[i];
    var prev = groups[i - 1][groups[i - 1].length - 1];
    if (!prev.dataset.after) break;
    if (g[0].getBoundingClientRect().top < window.innerHeight + margin) break;
    dropped += g.length;
  }
  if (i === groups.length - 1) return null;
  var last = groups[i][groups[i].length - 1];
  return { up: true, from: groups[i + 1][0], keep: last, url: last.dataset.after };
}

// Writes only: one range removed, one sentinel put in its place.
function applyDrops(plan) {
  var range = document.createRange(), row;
  if (!plan.up) {
    var less = document.getElementById("less");  // above the rows, when there is one
    range.setStartBefore(less && less.compareDocumentPosition(plan.from) & Node.DOCUMENT_POSITION_FOLLOWING ? less : plan.from);
    range.setEndAfter(plan.to);
    range.deleteContents();
    row = sentinel(true, plan.url);
    body().insertBefore(row, plan.keep);
  } else {
    range.setStartBefore(plan.from);
    range.setEndAfter(body().lastChild);  // with #more or #end-of-list
    range.deleteContents();
    row = sentinel(false, plan.url);
    body().appendChild(row);
  }
  arm(row);
}

// The reader's place across writes that can move it: rows put in or taken out above the first
// row in view. Measured before the writes (a read of the layout the last frame drew: nothing is
// laid out for it) and restored by one read after them, in the same task, before the reader or
// another script can scroll (a later restore would undo their scroll). Rows put in or taken out
// below the first row in view move nothing: no read at all.
function beforeWrites(above) { return above ? anchorNow() : null; }
function afterWrites(anchor) { restore(anchor); }

// Far pages normally go in the insertion's task (insert(), below). When that could not drop
// them (a load on that side was on its way, or they were not far enough yet) and the document
// is over the bound, they go in a task of their own after it, making room for the next page as
// well (`ahead` rows).
var trimQueued = false;
var pageRows = 20;  // rows in the last page loaded: the next one's size
function trimSoon(movingUp) {
  if (trimQueued) return;
  trimQueued = true;
  var run = function () { trimQueued = false; trim(movingUp, pageRows); };
  if (window.scheduler && scheduler.postTask) scheduler.postTask(run, { priority: "user-visible" });
  else setTimeout(run, 0);
}
// Not the side where a load is on its way: its sentinel would go with the rows.
function canDrop(movingUp) { return !loads.has(document.getElementById(movingUp ? "more" : "less")); }
function trim(movingUp, ahead) {
  if (!canDrop(movingUp)) return;
  var plan = planDrops(movingUp, ahead);
  if (!plan) return;
  var anchor = beforeWrites(!plan.up);
  applyDrops(plan);
  afterWrites(anchor);
}

// --- Loads ---------------------------------------------------------------------------------

// Row guard: a fragment that arrives twice (a retry after a lost response, a re-fired sentinel
// after history restore) must not show a row twice.
function guard(rows) {
  var fresh = new Set(rows), seen = new Set();
  dataRows().forEach(function (r) { if (!fresh.has(r)) seen.add(r.dataset.id); });
  return rows.filter(function (r) {
    guarded.add(r);
    if (seen.has(r.dataset.id)) { r.remove(); return false; }
    seen.add(r.dataset.id);
    return true;
  });
}

// The same guard for rows not yet in the document: those already on the page (found by their
// id) or twice in the fragment are left out before anything is inserted.
function guardFragment(fragment) {
  var rows = [], seen = new Set(), list = body();
  Array.prototype.slice.call(fragment.children).forEach(function (r) {
    if (!isRow(r)) return;
    var there = document.getElementById(r.id);
    if (seen.has(r.dataset.id) || (there && there.parentElement === list)) { r.remove(); return; }
    seen.add(r.dataset.id);
    guarded.add(r);
    rows.push(r);
  });
  return rows;
}

// A page of rows in place of its sentinel, inserted by the scroll window itself rather than by
// htmx's swap: htmx would walk every new element (its settle looks up each one with an id,
// its processing each one for hx- attributes and boosted links, its load event goes once per
// row, and it adds and then removes a class on every row, a style pass each). Here the rows are
// parsed into a detached fragment, guarded and given their local times there (no layout, no
// style), and go in by one replaceWith; htmx processes only the few elements that need it (the
// next sentinel, a "Load more" form), and the rows' links when first used (below).
function insert(load, target, html, incoming) {
  var tpl = document.createElement("template");
  tpl.innerHTML = html;
  var fragment = tpl.content;
  var rows = guardFragment(fragment);
  runHooks(fragment);
  var controls = Array.prototype.filter.call(fragment.children, function (el) { return !isRow(el); });
  // Far pages on the other side go in this task too, planned on the layout the last frame drew
  // (no read after a write): the drop and the new rows are laid out and painted once, together.
  var plan = canDrop(load.up) ? planDrops(load.up, incoming) : null;
  var anchor = beforeWrites(load.up || (plan && !plan.up));
  // A reader who sees no row, only the skeleton these rows replace (a fling reached the end of
  // what was loaded): the first new row keeps the skeleton's place. Without an anchor the drop
  // above pulled the next skeleton into view, which loaded again, page after page to the list's
  // end, while the reader saw no row (seen on a landscape phone).
  var skeletonTop = !anchor && plan && !plan.up && rows.length ? target.getBoundingClientRect().top : null;
  if (plan) applyDrops(plan);
  target.replaceWith(fragment);
  controls.forEach(function (el) {
    if (el.querySelector("[hx-get]")) htmx.process(el);  // a "Load more" form; sentinels need none
    arm(el);
  });
  afterWrites(skeletonTop === null ? anchor : { row: rows[0], top: skeletonTop });
  return rows;
}

// The rows' links are boosted (hx-boost on #rows) when they are first used, not as they arrive:
// htmx processes the element the moment it is clicked (its listener is on the link itself, and
// a listener added during the capture phase still runs at the target).
document.addEventListener("click", function (evt) {
  var link = evt.target.closest && evt.target.closest("#rows > tr[data-id] a[href]");
  if (link) htmx.process(link);
}, true);

// A sentinel's prefetch box (`data-get`: the URL of its rows; app.css makes it reach 800 px past
// the sentinel towards the reader) coming into view starts its load, once: a fetch by this module
// and its own intersection observer, not htmx's request cycle (its events, attribute lookups
// and XHR handling cost a tenth of a page's script at a phone's speed: docs/scroll.md). The
// request is the one htmx made (`HX-Request`: the server answers with the rows fragment), and
// the answer goes the same way as one htmx brought (landed(), below).
// The same timeout as htmx's other requests (base.html's htmx-config: the server's own bound
// plus a margin, so the server's error row comes before the browser gives up).
function timeoutMs() { return (window.htmx && htmx.config.timeout) || 15000; }
var armed = new WeakSet();
var near = "IntersectionObserver" in window ? new IntersectionObserver(function (entries) {
  entries.forEach(function (entry) {
    if (!entry.isIntersecting) return;
    near.unobserve(entry.target);
    var row = controlRow(entry.target);
    if (row && row.isConnected && !loads.has(row)) fetchRows(row, entry.target.dataset.get);
  });
}) : null;
function arm(root) {
  if (!near || !root || !root.querySelectorAll) return;
  var boxes = root.matches && root.matches("[data-get]") ? [root] : root.querySelectorAll("[data-get]");
  Array.prototype.forEach.call(boxes, function (box) {
    if (armed.has(box) || !box.isConnected) return;
    armed.add(box);
    near.observe(box);
  });
}
function fetchRows(row, url) {
  var up = row.id === "less";
  var box = row.querySelector("[data-get]") || row;
  var ctrl = window.AbortController ? new AbortController() : null;
  var load = { up: up, focus: !up && focusNext, elt: box, abort: ctrl };
  loads.set(row, load);
  focusNext = false;
  requesting.add(box);
  setBusy();
  var timer = setTimeout(function () { if (ctrl) ctrl.abort(); }, timeoutMs());
  fetch(url, {
    credentials: "same-origin",
    signal: ctrl ? ctrl.signal : undefined,
    headers: { "HX-Request": "true", "HX-Current-URL": location.href },
  }).then(function (response) {
    return response.text().then(function (text) {
      clearTimeout(timer);
      if (loads.get(row) !== load) return;  // aborted (the footer asked for), or the list replaced
      if (response.ok) landed(load, row, text);
      else showRetry(row, load, url, response.status, text);
    });
  }).catch(function () {
    clearTimeout(timer);
    if (loads.get(row) === load) showRetry(row, load, url, 0, "");
  });
}
function abort(load) {
  if (load.abort) load.abort.abort();
  else htmx.trigger(load.elt, "htmx:abort");
}
// Every load on its way given up (the list replaced: open(), Back).
function stopLoads() {
  loads.forEach(abort);
  requesting.forEach(function (elt) { htmx.trigger(elt, "htmx:abort"); });
  loads.clear();
  requesting.clear();
  setBusy();
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
  var up = row.id === "less";
  loads.set(row, { up: up, focus: !up && focusNext, elt: evt.detail.elt });
  focusNext = false;
  requesting.add(evt.detail.elt);
  setBusy();
});
function done(elt) {
  requesting.delete(elt);
  setBusy();
}
// For answers that were not swapped; a swapped sentinel is detached by then and its event
// does not reach the document, so afterSwap and showRetry end their loads themselves.
document.addEventListener("htmx:afterRequest", function (evt) { done(evt.detail.elt); });

document.addEventListener("htmx:beforeSwap", function (evt) {
  var detail = evt.detail;
  // (A boosted click's error page, an order deleted meanwhile say: navigation.js.)
  var load = loads.get(detail.target);
  if (!load || !detail.shouldSwap) return;
  // The rows go in by insert(), not by htmx's swap; after every handler of this event (one
  // that measures the place before the swap still sees the page as it was), in this task.
  detail.shouldSwap = false;
  var target = detail.target, html = detail.serverResponse || "";
  queueMicrotask(function () { landed(load, target, html); });
});

function landed(load, target, html) {
  loads.delete(target);
  done(load.elt);
  if (!target.isConnected) return;  // the list was replaced meanwhile (open(), Back)
  // Nothing is written yet: a listener still sees the page as it was.
  document.dispatchEvent(new CustomEvent("orders:arriving", { detail: { up: load.up } }));
  var incoming = html.split(' data-id="').length - 1;
  if (incoming) pageRows = incoming;
  var rows = insert(load, target, html, incoming);
  if (landing && !load.up) settleLanding();
  var message = rows.length + (load.up ? " earlier" : " more") + " orders loaded.";
  if (!load.up && !document.getElementById("more") && document.getElementById("end-of-list")) {
    message += " End of orders.";
  }
  announce(message);
  if (load.focus && rows.length) rows[0].focus({ preventScroll: false });
  if (maxRows() && dataRows().length > maxRows()) trimSoon(load.up);
  rememberPlaceSoon();
  document.dispatchEvent(new CustomEvent("orders:loaded", { detail: { rows: rows, up: load.up } }));
}

// A failed load leaves a Retry row (the server's _error_row.html, or the same row kept in a
// <template> when no answer came back) that asks for the same rows again.
function showRetry(row, load, url, status, text) {
  loads.delete(row);
  if (load) done(load.elt);
  var holder = document.createElement("tbody");
  if (status >= 400 && /^\s*(<!--.*?-->\s*)?<tr[\s>]/.test(text || "") && /class="[^"]*error-row/.test(text)) {
    holder.innerHTML = text;  // our own server's escaped template
  }
  var retry = holder.querySelector("tr.error-row") || fromTemplate("retry-row");
  retry.id = row.id;
  retry.dataset.url = url;
  // No Retry where asking again cannot succeed (a stale cursor): the row links to the first page.
  var again = retry.querySelector("[data-retry]");
  if (again) again.addEventListener("click", function () {
    focusNext = !(load && load.up);
    if (retry.isConnected && !loads.has(retry)) fetchRows(retry, url);
  });
  row.replaceWith(retry);
  setBusy();
  announce(again ? "Couldn't load more orders. Retry is available."
    : "Couldn't load more orders. A link to the first page is available.");
}
// The same for a load htmx made (the "Load more" form, htmx.ajax from elsewhere).
function showHtmxRetry(evt) {
  var row = controlRow(evt.detail.elt);
  if (!row) return;
  done(evt.detail.elt);
  var url = requestedPath(evt.detail) || row.dataset.url;
  var xhr = evt.detail.xhr;
  showRetry(row, loads.get(row), url, xhr ? xhr.status : 0, xhr ? xhr.responseText : "");
}
document.addEventListener("htmx:responseError", showHtmxRetry);
document.addEventListener("htmx:sendError", showHtmxRetry);
document.addEventListener("htmx:timeout", showHtmxRetry);

// Rows that came by any other way (htmx.ajax from elsewhere) pass the same guard.
htmx.onLoad(function (elt) {
  if (isRow(elt)) {
    if (guarded.has(elt) || elt.parentElement !== body()) return;
    if (guard([elt]).length === 0) return;
  }
  runHooks(elt.querySelectorAll ? elt : document);
  arm(elt);
});

// Back without a snapshot: htmx fetched the page again (a full page, at the address's
// position); put the named row on top. With a snapshot htmx restores the old scroll itself.
document.addEventListener("htmx:historyRestore", function (evt) {
  releaseHold();
  stopLoads();
  arm(document);
  if (evt.detail && evt.detail.cacheMiss) goToNamedRow();
});

// --- The footer asked for: the rows below wait until the reader scrolls on --------------------
// "Site links" brings the footer into view at any depth. Rows loading below would arrive above
// it and push it away, so the sentinel below is held: its load, if one is on its way, is
// aborted, and it shows as a "Load more orders" link. The hold ends with the reader's next move
// (a wheel or a finger either way, a scroll key, the link itself) or when the footer leaves the
// view by any other means (the scrollbar): a fresh sentinel takes the held one's place and the
// list goes on loading from the same cursor, so no row is skipped or shown twice.
var held = null;        // the held #more row
var heldFooter = null;  // IntersectionObserver on the footer while held
var SCROLL_KEYS = { ArrowDown: 1, ArrowUp: 1, PageDown: 1, PageUp: 1, " ": 1, j: 1, k: 1 };

export function holdBelow() {
  var more = document.getElementById("more");
  if (!more || !more.classList.contains("sentinel")) return;  // the end, a button or a Retry already
  var load = loads.get(more);
  if (load) {  // on its way: aborted
    loads.delete(more);
    abort(load);
    requesting.delete(load.elt);
  }
  var prefetch = more.querySelector(".prefetch");
  if (prefetch) {
    if (near) near.unobserve(prefetch);
    prefetch.remove();
  }
  more.classList.add("paused");
  var next = more.querySelector(".next-link");
  next.textContent = "Load more orders";
  next.classList.add("button");
  held = more;
  setBusy();
  document.dispatchEvent(new CustomEvent("orders:rows-changed"));
  var footer = document.getElementById("site-footer");
  if (heldFooter) heldFooter.disconnect();
  heldFooter = null;
  if (footer && "IntersectionObserver" in window) {
    var seen = false;
    heldFooter = new IntersectionObserver(function (entries) {
      var inView = entries[entries.length - 1].isIntersecting;
      if (inView) seen = true;
      else if (seen) resumeBelow(false);
    });
    heldFooter.observe(footer);
  }
}

// The held sentinel back as a loading one (its URL unchanged); `focus`: the first new row gets
// the focus (the link was pressed, or the keys moved on from the footer).
function resumeBelow(focus) {
  var more = held;
  held = null;
  if (heldFooter) heldFooter.disconnect();
  heldFooter = null;
  if (!more || !more.isConnected) return;
  var footer = document.getElementById("site-footer");
  var active = document.activeElement;
  var fromFooter = !!active && ((footer && footer.contains(active)) || more.contains(active));
  var row = sentinel(false, more.querySelector(".next-link").getAttribute("href"));
  more.replaceWith(row);
  arm(row);
  // The footer hides while rows are to come (app.css): focus must not stay on it.
  if (fromFooter) {
    var last = lastRow();
    if (last) last.focus({ preventScroll: true });
    focusNext = true;
  } else if (focus) {
    focusNext = true;
  }
}
function resumeOnInput(evt) {
  if (!held) return;
  if (evt.type === "wheel" && !evt.deltaY) return;
  if (evt.type === "keydown") {
    var el = evt.target;
    if (!SCROLL_KEYS[evt.key] || evt.altKey || evt.ctrlKey || evt.metaKey) return;
    if (el && (el.isContentEditable || /^(INPUT|SELECT|TEXTAREA)$/.test(el.tagName))) return;
  }
  resumeBelow(false);
}
window.addEventListener("wheel", resumeOnInput, { passive: true });
window.addEventListener("touchmove", resumeOnInput, { passive: true });
document.addEventListener("keydown", resumeOnInput, true);
document.addEventListener("click", function (evt) {
  var link = evt.target.closest && evt.target.closest("#more.paused .next-link");
  if (!link || evt.button !== 0 || evt.metaKey || evt.ctrlKey || evt.shiftKey) return;
  evt.preventDefault();
  if (!held) held = link.closest("#more");
  resumeBelow(true);
});
function releaseHold() {
  held = null;
  if (heldFooter) heldFooter.disconnect();
  heldFooter = null;
}

// --- open(): the list at another URL, in place -----------------------------------------------

function abortLoads() {
  releaseHold();
  stopLoads();
}

export function open(url, options) {
  options = options || {};
  var t = table();
  if (t) t.setAttribute("aria-busy", "true");
  return fetch(url, { credentials: "same-origin", headers: { Accept: "text/html" } }).then(function (response) {
    return response.text().then(function (text) {
      var doc = new DOMParser().parseFromString(text, "text/html");
      var fresh = doc.getElementById("orders");
      if (!response.ok || !fresh) {
        var message = doc.querySelector(".error-message");
        var err = new Error(message ? message.textContent.trim() : "the server answered " + response.status);
        err.status = response.status;
        throw err;
      }
      abortLoads();
      var target = new URL(response.url);
      var named = /^#order-(\d+)$/.exec(new URL(url, location.href).hash);
      var banner = document.getElementById("new-orders"), freshBanner = doc.getElementById("new-orders");
      var list = document.adoptNode(fresh);
      table().replaceWith(list);
      if (banner) banner.remove();
      if (freshBanner) {
        freshBanner = document.adoptNode(freshBanner);
        list.parentElement.insertBefore(freshBanner, document.getElementById("announcer") || list);
        htmx.process(freshBanner);
      }
      htmx.process(list);
      runHooks(list);
      arm(list);
      var first = firstRow();
      var id = options.row != null ? String(options.row) : named ? named[1] : first && first.dataset.id;
      var row = id && document.getElementById("order-" + id);
      if (!row) row = first;
      var address = target.pathname + target.search;
      if (row && (document.getElementById("less") || row !== first)) address += "#order-" + row.dataset.id;
      setAddress(address, options.push !== false);
      opened = true;
      place = null;
      shownRow = null;
      land(row ? row.dataset.id : null);
      if (!row) window.scrollTo(0, 0);
      if (row && options.focus) row.focus({ preventScroll: true });
      setBusy();
      var result = { row: row, url: address };
      document.dispatchEvent(new CustomEvent("orders:opened", { detail: result }));
      return result;
    });
  }).catch(function (err) {
    setBusy();
    throw err;
  });
}

// Back and forward between entries open() made: show the list at that entry's address.
// (htmx restores its own entries, the boosted navigations, itself.)
window.addEventListener("popstate", function (evt) {
  if (!opened || (evt.state && evt.state.htmx) || !table()) return;
  open(here(), { push: false });
});

// --- Start --------------------------------------------------------------------------------

// We put the reader back ourselves, at the row the address names: the browser's own restore
// of the old scroll offset would land somewhere else in a document that starts elsewhere.
if ("scrollRestoration" in history) history.scrollRestoration = "manual";

export function start() {
  arm(document);
  goToNamedRow();
  notePlaceSoon();
}

export var api = {
  open: open,
  land: land,
  busy: busy,
  firstVisibleRow: firstVisibleRow,
  refresh: refresh,
  holdBelow: holdBelow,
  rows: ROWS,
};
