// The scroll window: the rows kept in the document while the reader scrolls both ways.
//
//   loads       pages arrive above (#less) and below (#more) as their sentinels come near
//   drops       whole pages far from the reader go, so at most MAX_ROWS_IN_PAGE rows remain,
//               and a sentinel (cloned from orders.html's <template>) loads them again
//   the place   what the reader sees does not move when rows arrive or go above it, nor when
//               the window is resized; a row named by the address is brought to the top
//   the address the URL of the page holding the first row in view, plus that row
//
// Every page of rows is an htmx request: a sentinel row's hx-get, fired by its hx-trigger (htmx's
// intersection observer) as it nears the view; the answer goes in by this module's htmx
// extension, its own swap style "scroll-window" (one replaceWith of htmx's parsed fragment, in a
// task after the next frame, htmx walking only the new control rows); far pages go in the same
// task, just before them, so one frame lays out and paints both.
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
  ROWS, announce, body, dataRows, firstRow, fromTemplate, isRow, lastRow, listTop, store, stored, table
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

var inserting = new Set();   // control rows whose answer is in and whose rows go in after a frame

export function busy() { return requesting.size > 0 || inserting.size > 0; }

// (A loading row shows so by htmx's own class, htmx-request: app.css.)
function setBusy() {
  var t = table();
  if (t) t.setAttribute("aria-busy", busy() ? "true" : "false");
}
function controlRow(elt) { return elt && elt.closest ? elt.closest("#more, #less") : null; }

// --- Where the reader is -------------------------------------------------------------------

var insetPx = null;
function inset() {
  if (insetPx === null) insetPx = listTop();
  return insetPx;
}
export function refresh() { insetPx = null; }

// The first row at least partly in view (rows are in document order: binary search over #rows'
// children, the control rows at either end left out). Not over dataRows(): its selector matches
// every element in the rows, about 2,500 for 200 rows, to keep 200, with every address noted.
export function firstVisibleRow() {
  var list = body();
  if (!list) return null;
  var kids = list.children, lo = 0, hi = kids.length - 1, found = null, edge = inset() + 1;
  while (lo <= hi && !isRow(kids[lo])) lo++;
  while (hi >= lo && !isRow(kids[hi])) hi--;
  while (lo <= hi) {
    var mid = (lo + hi) >> 1;
    if (kids[mid].getBoundingClientRect().bottom > edge) { found = kids[mid]; hi = mid - 1; } else { lo = mid + 1; }
  }
  while (found && !isRow(found)) found = found.nextElementSibling;  // never so far: rows only between the ends
  return found;
}

function anchorNow() {
  var row = firstVisibleRow(), box = row && row.getBoundingClientRect();
  return row && { row: row, top: box.top, inset: inset(), height: box.height };
}
// One read after all the writes: scroll back by what the anchor moved. Chromium's CSS scroll
// anchoring often did it already (then the shift is 0); Safari and `overflow-anchor: none` not.
// Across a resize the row goes as far below the list's top (the sticky bar's height changes with
// the size) and with as much of its height under it (a card is 71 px, a table row 42: a card all
// but 1.6 px under the bar kept its 70 px as a table row, and the next row lay 27 px under the
// bar). A shift of at most `slack` px is left.
function restore(anchor, slack) {
  if (!anchor || !anchor.row.isConnected) return;
  var box = anchor.row.getBoundingClientRect(), top = anchor.top;
  if (anchor.inset !== undefined) top = inset() + (top - anchor.inset) * (box.height / anchor.height || 1);
  var shift = box.top - top;
  // To the nearest whole pixel (WebKit's scrollBy drops the fraction: 1.9 px moves there).
  if (Math.abs(shift) >= 0.5 && Math.abs(shift) > (slack || 0)) window.scrollTo(window.scrollX, Math.round(window.scrollY + shift));
}
// `change` (something above the rows changing height) with the first row in view kept where it was.
function keepingPlace(change) {
  var anchor = anchorNow();
  change();
  restore(anchor);
}

// The place as the reader last saw it, for a resize (the old layout is gone by then). While the
// reader scrolls (their input: a wheel, a key, a finger, the scrollbar) it is noted with the
// address (rememberPlace, below, at most every PLACE_MS), not in every frame of it; a resize meanwhile is
// left to the browser's scroll anchoring rather than jumping back to where the reader was when
// the place was noted. Other scrolls (a script's: the sticky bar's height kept, a landing, a
// resize's restore) note it in the next frame, as every scroll did before.
var place = null;
var placeFrame = 0;
var scrolledSince = false;  // the reader's input since the place was noted
function notePlaceSoon() {
  if (!placeFrame) {
    placeFrame = requestAnimationFrame(function () {
      placeFrame = 0;
      if (resizePending()) return;
      place = anchorNow();
      scrolledSince = false;
    });
  }
}
// The viewport's size as the last resize event left it. The browser sends that event in its next
// rendering step, but a timer or a frame of ours can run before it at the new size, where the
// rows have already moved: a place noted then is no place of the reader's, and the resize then
// kept it (under load, a rotation named and kept a row 3 above the reader's, or 15 px off).
// Until the event has been handled, nothing is noted; a size that no resize event follows within
// RESIZE_WAIT_MS is taken as it is (Safari's innerWidth follows a pinch zoom, which sends none).
var RESIZE_WAIT_MS = 1000;
var sizeSeen = viewportSize();
var sizeDiffSince = 0;
var resizeFrame = 0;  // while a resize's place is kept frame by frame (below)
function viewportSize() { return window.innerWidth + "x" + window.innerHeight; }
function resizePending() {
  if (resizeFrame) return true;
  var size = viewportSize();
  if (size === sizeSeen) { sizeDiffSince = 0; return false; }
  var now = performance.now();
  if (!sizeDiffSince) sizeDiffSince = now;
  if (now - sizeDiffSince < RESIZE_WAIT_MS) return true;
  sizeSeen = size;
  sizeDiffSince = 0;
  return false;
}

// The address bar follows the reader: the URL of the page holding the first row in view, plus
// that row as the fragment. replaceState adds no history entry and keeps the entry's state (htmx
// 4 restores only entries it marked, by a full GET of the address: no snapshot to move along).
function here() { return location.pathname + location.search + location.hash; }
// The address without its row: which list, at which page, the rows in view came from.
function listPath() { return location.pathname + location.search; }
var shownPath = listPath();
function setAddress(url, push) {
  if (push) history.pushState({ ordersList: true }, "", url);
  else if (url !== here()) history.replaceState(history.state, "", url);
  shownPath = listPath();
}
function addressOf(row, top) {
  var start = row;
  while (start && !start.hasAttribute("data-pos")) start = start.previousElementSibling;
  if (!isRow(start)) return null;
  var atTop = !document.getElementById("less") && row === firstRow() && top >= inset();
  return start.dataset.pos + (atTop ? "" : "#order-" + row.dataset.id);
}
var shownRow = null;
// From Back's "before restore" until the restored body is in and the reader put back: the
// body htmx swapped in keeps the old page's offset, so the row in view then is no place of the
// reader's (noted, it named a row of the old offset, and the restore then landed there).
var restoring = false;
function rememberPlace() {
  if (restoring) return;
  if (resizePending()) { rememberPlaceSoon(); return; }  // again once the resize is handled
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
// Throttled, not debounced: during a fling (a phone's keeps moving for about 2 s after the
// finger lifts) the address follows the row in view every PLACE_MS, so that a reload at any
// moment opens near where the reader is (it reloads the address as it is: pagehide comes too
// late to change it); the last run comes after the scroll's last event.
var PLACE_MS = 200;
var placeTimer = null;
function rememberPlaceSoon() {
  if (placeTimer === null) placeTimer = setTimeout(function () { placeTimer = null; rememberPlace(); }, PLACE_MS);
}
window.addEventListener("scroll", function () {
  if (!scrolledSince) notePlaceSoon();
  rememberPlaceSoon();
}, { passive: true });
// Leaving (a click on a link or button, a reload): the address must name the place now, not in
// up to PLACE_MS; Back comes back to it (there is no snapshot: it is the only record of the place).
function flushPlace() { clearTimeout(placeTimer); placeTimer = null; rememberPlace(); saveRowTops(); }
document.addEventListener("click", function (evt) {
  if (evt.target.closest && evt.target.closest("a[href], button") && table()) flushPlace();
}, true);
window.addEventListener("pagehide", function () { if (table()) flushPlace(); });

// A resize or rotation reflows every row (cards below 52rem): the row that was first in view
// goes back where it was below the list's top, and the address (which names it) stays true.
// WebKit measures the bar (controls.js) before the event and applies the new size's media queries
// after it, at times frames later (the rows turn to cards, the bar folds or opens): the row is put
// back in every frame until two frames move nothing (at most 30), and nothing is noted meanwhile
// (a place noted then named a row above or below the reader's). A pixel is left: controls.js puts
// a row within a pixel of the top on it, and a pixel more showed the row above 1.1 px (Firefox,
// 620x800 to 844x390), which then counted as the first in view.
window.addEventListener("resize", function () {
  sizeSeen = viewportSize();
  sizeDiffSince = 0;
  insetPx = null;
  cancelAnimationFrame(resizeFrame);
  resizeFrame = 0;
  if (landing) { settleLanding(); return; }
  var kept = place && !scrolledSince && place.row.isConnected ? place : null;
  restore(kept);
  var still = 0, frames = 0;
  var again = function () {
    insetPx = null;
    var y = window.scrollY;
    if (!scrolledSince) restore(kept, 1);
    still = window.scrollY === y ? still + 1 : 0;
    resizeFrame = scrolledSince || still >= 2 || ++frames >= 30 ? 0 : requestAnimationFrame(again);
  };
  if (kept) resizeFrame = requestAnimationFrame(again);
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
  // What is left, to the nearest whole pixel: WebKit's scrollIntoView stops up to 2 px low (whole-
  // pixel scroll positions, fractional rows), and the address then named the row above.
  var off = row.getBoundingClientRect().top - inset() - top;
  if (Math.abs(off) >= 0.5) window.scrollTo(window.scrollX, Math.round(window.scrollY + off));
  if (Math.abs(row.getBoundingClientRect().top - inset() - top) <= 1) landing = null;
}
// The first row in view is often partly under the list's top (the sticky headers): how far is
// kept per address for this tab (sessionStorage; htmx replaces history.state when a link is
// followed), so that Back and reload put the named row where the reader left it, not a fraction
// of a row lower (1280x800: 14-25 px, and a focused row at the bottom of the screen then cut off).
var ROW_TOPS = "orders-row-tops";  // {address: px}, the 20 latest
// Read from sessionStorage once: only this module writes it, and keepRowTop runs with every
// change of the address while the reader scrolls (parsing it each time was a third of its cost).
var rowTops = null;
function readRowTops() {
  if (rowTops === null) rowTops = JSON.parse(stored(ROW_TOPS) || "{}");
  return rowTops;
}
// Kept here with every change of the address; written to sessionStorage only when this document
// may be left (flushPlace: a click on a link or button, pagehide), not 4-5 times a second while
// the reader scrolls: this document reads its own copy, the next one (a reload) the stored one.
var rowTopsChanged = false;
function keepRowTop(top) {
  var px = Math.round(Math.min(0, top - inset())), url = here();
  try {
    var tops = readRowTops();
    if (tops[url] === px) return;
    delete tops[url];
    tops[url] = px;  // the latest last
    Object.keys(tops).slice(0, -20).forEach(function (old) { delete tops[old]; });
    rowTopsChanged = true;
  } catch (e) { /* a kept value that is no JSON of ours: the row lands at the list's top */ }
}
function saveRowTops() {
  if (!rowTopsChanged) return;
  rowTopsChanged = false;
  store(ROW_TOPS, JSON.stringify(rowTops));
}
function keptRowTop() {
  try {
    var px = readRowTops()[here()];
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
// htmx processes it once it is in the document (its trigger, `hx-get` its rows' URL).
function sentinel(up, url) {
  var row = fromTemplate(up ? "less-row" : "more-row");
  row.setAttribute("hx-get", url);
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

// A sentinel already at that end that has not fired (htmx processed it, it waits for its
// trigger): it can load the dropped rows instead of a new one. htmx reads `hx-get` when the trigger
// fires, so a new URL is all it needs; its observer goes on watching it.
function waiting(row) {
  return !!row && row.classList.contains("sentinel") && !row.classList.contains("paused") && !!row._htmx &&
    row.hasAttribute("hx-get") && !loads.has(row) && !requesting.has(row);
}
function pointAt(row, url) {
  row.setAttribute("hx-get", url);
  row.querySelector("a").setAttribute("href", url);
}

// Writes only: one range removed, one sentinel in its place: the one already at that end, given
// the dropped rows' URL (no new element for htmx to process and observe), else a new one.
function applyDrops(plan) {
  var range = document.createRange(), row = null;
  if (!plan.up) {
    var less = document.getElementById("less");  // above the rows, when there is one
    var withLess = less && less.compareDocumentPosition(plan.from) & Node.DOCUMENT_POSITION_FOLLOWING;
    var keepLess = withLess && waiting(less) && less.nextElementSibling === plan.from;
    if (withLess && !keepLess) release(less);
    range.setStartBefore(withLess && !keepLess ? less : plan.from);
    range.setEndAfter(plan.to);
    range.deleteContents();
    if (keepLess) {
      pointAt(less, plan.url);
    } else {
      row = sentinel(true, plan.url);
      body().insertBefore(row, plan.keep);
    }
  } else {
    var more = document.getElementById("more"), last = body().lastElementChild;
    var keepMore = !!more && more === last && waiting(more);
    if (more && !keepMore) release(more);
    range.setStartBefore(plan.from);
    if (keepMore) range.setEndBefore(more);
    else range.setEndAfter(body().lastChild);  // with #more or #end-of-list
    range.deleteContents();
    if (keepMore) {
      pointAt(more, plan.url);
    } else {
      row = sentinel(false, plan.url);
      body().appendChild(row);
    }
  }
  if (row) htmx.process(row);
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

// A page of rows in place of its sentinel, inserted by the scroll window's swap style rather
// than by one of htmx's: htmx would walk every new element (its processing looks at each one for
// hx- attributes and boosted links, and it adds and then removes a class on every row, a style
// pass each). htmx parses the answer into a detached fragment; here the rows are guarded and
// given their local times there (no layout, no style) and go in by one replaceWith, a frame
// later (swapRows). htmx then processes only the few elements that need it (the next sentinel, a
// "Load more" form: the controls returned, given to htmx.process), and the rows' links when
// first used (below).
function insert(load, target, fragment, incoming) {
  var rows = guardFragment(fragment);  // (the hooks ran on it in htmx's answer task: swapRows)
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
  release(target);
  target.replaceWith(fragment);
  afterWrites(skeletonTop === null ? anchor : { row: rows[0], top: skeletonTop });
  return { rows: rows, controls: controls };
}

// The rows' links are boosted (hx-boost on #rows) when they are first used, not as they arrive:
// htmx processes the element the moment it is clicked (its listener is on the link itself, and
// a listener added during the capture phase still runs at the target).
document.addEventListener("click", function (evt) {
  var link = evt.target.closest && evt.target.closest("#rows > tr[data-id] a[href]");
  if (link) htmx.process(link);
}, true);

// --- The htmx extension: every page of rows is an htmx request -----------------------------
// A sentinel row carries its rows' URL (`hx-get`), `hx-trigger="intersect once rootMargin:..."`
// (htmx's own intersection observer: the next rows start loading while the reader is still a
// screen away) and `hx-swap="scroll-window"`, the swap style below: htmx makes the request (its
// events, headers, timeout, abort) and hands over the parsed answer; the insertion, the drops and
// the reader's place are this module's. So are "Load more" (a GET form), Retry, and open() (Top,
// End, go to, the new-orders pill: htmx.ajax with the "scroll-window-list" style).
// The loads in flight, by the row they replace (#more, #less): set when htmx sends the request,
// given the answer's status when it comes, ended by the swap, an error or htmx's "finally".
var api = null;
htmx.registerExtension("scroll-window", {
  init: function (internal) { api = internal; },
  htmx_before_request: function (elt, detail) {
    var ctx = detail.ctx, row = controlRow(ctx.target);
    if (!row || ctx.swap !== "scroll-window") return;
    var up = row.id === "less";
    loads.set(row, { up: up, focus: !up && focusNext, elt: elt, ctx: ctx });
    focusNext = false;
    requesting.add(elt);
    setBusy();
  },
  htmx_after_request: function (elt, detail) {
    var opening = detail.ctx.scrollWindowOpen;
    if (opening) return opening.answered(detail.ctx);  // false: not swapped
  },
  // The swap styles below are called without the request: it goes with each task.
  htmx_before_swap: function (elt, detail) {
    detail.tasks.forEach(function (task) { if (task.swapSpec) task.swapSpec.ctx = detail.ctx; });
  },
  htmx_error: function (elt, detail) {
    // No answer (the network, htmx's timeout): a Retry row from the <template>.
    var ctx = detail.ctx, row = ctx && controlRow(ctx.target);
    if (ctx && ctx.scrollWindowOpen) ctx.scrollWindowOpen.failed(new Error("the server did not answer"));
    if (row && loads.has(row) && loads.get(row).ctx === ctx) showRetry(row, loads.get(row), ctx.request.action, 0, null);
  },
  htmx_finally_request: function (elt, detail) {
    done(elt);
    var opening = detail.ctx.scrollWindowOpen;
    if (opening) opening.failed(new Error("the request was given up"));
  },
  handle_swap: function (style, target, fragment, swapSpec) {
    if (style === "scroll-window") return swapRows(target, fragment);
    if (style === "scroll-window-list") return swapList(target, fragment, swapSpec.ctx);
    return false;
  },
});

// htmx's own per-element state goes with a control row that this module takes out of the
// document itself (a swap, a drop, a hold): its intersection observer (htmx keeps it after an
// `intersect once` has fired) and its listeners. htmx's cleanup runs only for its own swaps.
function release(root) {
  var elts = root.querySelectorAll ? [root].concat(Array.prototype.slice.call(root.querySelectorAll("[data-htmx-powered]"))) : [];
  elts.forEach(function (el) {
    var state = el._htmx;
    if (!state) return;
    (state.triggerSpecs || []).forEach(function (spec) { if (spec.observer) spec.observer.disconnect(); });
    (state.listeners || []).forEach(function (info) { info.fromElt.removeEventListener(info.eventName, info.handler, info); });
    state.listeners = [];
    state.triggerSpecs = [];
  });
}

// The swap style "scroll-window": the rows in place of their sentinel (or a Retry row for an
// answer with an error status). Returns the new control rows, which htmx then processes (the
// next sentinel's trigger, a "Load more" form); the rows themselves it never walks.
function swapRows(target, fragment) {
  var load = loads.get(target);
  if (!load) return [];  // given up meanwhile (the footer asked for, the list replaced)
  var status = load.ctx.response ? load.ctx.response.status : 0;
  if (status >= 400) {
    showRetry(target, load, load.ctx.request.action, status, fragment);
    return [];
  }
  // The rows go in by a task of their own after the next frame, not in htmx's answer task: the
  // parse, htmx's events and the hooks (here, on the detached rows) in one task, the drop, the
  // insertion and the layout the reader's place reads in the next, so a frame can be drawn
  // between them (at 4x CPU the two together made gaps of five to seven frames: docs/performance.md).
  // Meanwhile the load stays in `loads` (no drop takes its sentinel; busy() holds), and a list
  // replaced or a hold (stopLoads, holdBelow) ends it: its rows are then not inserted.
  runHooks(fragment);
  inserting.add(target);
  afterNextFrame(function () {
    inserting.delete(target);
    if (loads.get(target) !== load) { setBusy(); return; }
    landed(load, target, fragment).forEach(function (el) { htmx.process(el); });
  });
  return [];
}
// After the next frame is drawn (a hidden tab draws none: then in the next task).
function afterNextFrame(fn) {
  if (document.hidden) setTimeout(fn, 0);
  else requestAnimationFrame(function () { setTimeout(fn, 0); });
}

function abort(load) { htmx.trigger(load.elt, "htmx:abort"); }
// Every load on its way given up (the list replaced: open(), Back).
function stopLoads() {
  loads.forEach(abort);
  requesting.forEach(function (elt) { htmx.trigger(elt, "htmx:abort"); });
  loads.clear();
  requesting.clear();
  inserting.clear();
  setBusy();
}

// Enter and Space on the button both arrive as a click, before htmx sends the form. (Not on
// submit: that bubbles here after htmx started the request, and would hand the focus to the
// next automatic load instead.)
document.addEventListener("click", function (evt) {
  if (evt.target.closest && evt.target.closest("[data-load-more]")) focusNext = true;
});

function done(elt) {
  requesting.delete(elt);
  setBusy();
}

function landed(load, target, fragment) {
  loads.delete(target);
  done(load.elt);
  if (!target.isConnected) return [];  // the list was replaced meanwhile (open(), Back)
  // Nothing is written yet: a listener still sees the page as it was.
  document.dispatchEvent(new CustomEvent("orders:arriving", { detail: { up: load.up } }));
  var incoming = 0;
  for (var el = fragment.firstElementChild; el; el = el.nextElementSibling) if (isRow(el)) incoming++;
  if (incoming) pageRows = incoming;
  var result = insert(load, target, fragment, incoming);
  var rows = result.rows;
  if (landing) settleLanding();
  var message = rows.length + (load.up ? " earlier" : " more") + " orders loaded.";
  if (!load.up && !document.getElementById("more") && document.getElementById("end-of-list")) {
    message += " End of orders.";
  }
  announce(message);
  if (load.focus && rows.length) rows[0].focus({ preventScroll: false });
  if (maxRows() && dataRows().length > maxRows()) trimSoon(load.up);
  rememberPlaceSoon();
  document.dispatchEvent(new CustomEvent("orders:loaded", { detail: { rows: rows, up: load.up } }));
  return result.controls;
}

// A failed load leaves a Retry row (the server's _error_row.html from the answer, or the same row
// kept in a <template> when no answer came back) whose button asks htmx for the same rows again.
function showRetry(row, load, url, status, fragment) {
  loads.delete(row);
  if (load) done(load.elt);
  if (!row.isConnected) return;
  var sent = status >= 400 && fragment && fragment.querySelector ? fragment.querySelector("tr.error-row") : null;
  var retry = sent || fromTemplate("retry-row");
  retry.id = row.id;
  retry.dataset.url = url;
  // No Retry where asking again cannot succeed (a stale cursor): the row links to the first page.
  var again = retry.querySelector("[data-retry]");
  if (again) again.addEventListener("click", function () {
    focusNext = !(load && load.up);
    if (retry.isConnected && !loads.has(retry)) {
      htmx.ajax("GET", url, { source: retry, target: retry, swap: "scroll-window" });
    }
  });
  release(row);
  row.replaceWith(retry);
  setBusy();
  announce(again ? "Couldn't load more orders. Retry is available."
    : "Couldn't load more orders. A link to the first page is available.");
}

// Rows that came by any other way (htmx.ajax with one of htmx's own swaps) pass the same guard.
htmx.onLoad(function (elt) {
  if (isRow(elt)) {
    if (guarded.has(elt) || elt.parentElement !== body()) return;
    if (guard([elt]).length === 0) return;
  }
  if (elt.querySelectorAll) runHooks(elt);
});

// Back to an entry htmx made (a boosted link was followed from it): htmx 4 asks the server for
// the address again (a full page, at the address's position, `HX-History-Restore-Request`) and
// swaps the body. Loads on their way go before; once the new body is in, "orders:restored" tells
// the other parts of the page (the find bar, focus, the stream) and the named row goes on top.
document.addEventListener("htmx:before:history:restore", function () {
  releaseHold();
  stopLoads();
  clearTimeout(placeTimer);
  placeTimer = null;
  restoring = true;
});
function isRestore(ctx) {
  var headers = ctx && ctx.request && ctx.request.headers;
  return !!headers && headers["HX-History-Restore-Request"] === "true";
}
document.addEventListener("htmx:after:swap", function (evt) {
  if (!isRestore(evt.detail.ctx)) return;
  evt.detail.ctx.scrollWindowSwapped = true;
  restoring = false;
  if (!table()) return;
  // Styled already: the body brings no stylesheet of its own (base.html keeps them in the head).
  insetPx = null;
  place = null;
  shownRow = null;
  // The find bar measures itself first (controls.js): the row lands below the bar as it is now.
  document.dispatchEvent(new CustomEvent("orders:restored"));
  // An address at the top of the list names no row: the top goes on top. The swapped body
  // keeps the offset of the page Back came from (a go-to's, the rail's), which is elsewhere.
  if (!/^#order-\d+$/.test(location.hash) && !document.getElementById("less")) window.scrollTo(window.scrollX, 0);
  goToNamedRow();
});
// A restore that swapped nothing (no answer, an error) leaves the old page as it was: noted again.
document.addEventListener("htmx:finally:request", function (evt) {
  var ctx = evt.detail && evt.detail.ctx;
  if (isRestore(ctx) && !ctx.scrollWindowSwapped) restoring = false;
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
  // Its trigger goes (htmx's observer, the `hx-get`): nothing loads until the hold ends.
  release(more);
  more.removeAttribute("hx-get");
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
  htmx.process(row);
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
  return new Promise(function (resolve, reject) {
    var settled = false;
    var opening = {
      url: url,
      options: options,
      // htmx_after_request: the answer is in, nothing swapped yet. A refusal (a go to the server
      // cannot read) leaves the list as it is, with the server's message.
      answered: function (ctx) {
        if (ctx.response.status < 400) return true;
        var doc = new DOMParser().parseFromString(ctx.text || "", "text/html");
        var message = doc.querySelector(".error-message");
        var err = new Error(message ? message.textContent.trim() : "the server answered " + ctx.response.status);
        err.status = ctx.response.status;
        opening.failed(err);
        return false;
      },
      failed: function (err) {
        if (settled) return;
        settled = true;
        setBusy();
        reject(err);
      },
      opened: function (result) {
        settled = true;
        resolve(result);
      },
    };
    // The whole page, of which htmx keeps the list and the new-orders pill (`select`: htmx
    // sends HX-Request-Type "full", and the server answers with the page, not a fragment).
    htmx.ajax("GET", url, {
      source: t, target: t, swap: "scroll-window-list", select: "#orders, #new-orders", scrollWindowOpen: opening,
    }).then(function () { opening.failed(new Error("the list was not shown")); }, opening.failed);
    // (No answer, or one given up: htmx's "finally" ends it too, and an ended opening stays so.)
  });
}

// The swap style "scroll-window-list": the list (and the pill) of the page open() asked for in
// place of the one shown, the rest of the page kept (toolbar, focus); returns what htmx is to
// process (the sentinels, the pill's poll).
function swapList(target, fragment, ctx) {
  var opening = ctx && ctx.scrollWindowOpen, options = opening ? opening.options : {};
  var fresh = fragment.querySelector("#orders");
  if (!opening || !fresh) {
    if (opening) opening.failed(new Error("the answer held no list"));
    return [];
  }
  abortLoads();
  var final = new URL((ctx.response.raw && ctx.response.raw.url) || opening.url, location.href);
  var named = /^#order-(\d+)$/.exec(new URL(opening.url, location.href).hash);
  var banner = document.getElementById("new-orders"), freshBanner = fragment.querySelector("#new-orders");
  release(target);
  target.replaceWith(fresh);
  if (banner) { release(banner); banner.remove(); }
  var processed = [fresh];
  if (freshBanner) {
    fresh.parentElement.insertBefore(freshBanner, document.getElementById("announcer") || fresh);
    processed.push(freshBanner);
  }
  runHooks(fresh);
  var first = firstRow();
  var id = options.row != null ? String(options.row) : named ? named[1] : first && first.dataset.id;
  var row = id && document.getElementById("order-" + id);
  if (!row) row = first;
  var address = final.pathname + final.search;
  if (row && (document.getElementById("less") || row !== first)) address += "#order-" + row.dataset.id;
  setAddress(address, options.push !== false);
  opened = true;
  place = null;
  shownRow = null;
  // Top (Home) is the page's own top, the site's header in view as on a first visit; anything
  // else lands its row under the list's top.
  var pageTop = options.top || !row;
  land(pageTop ? null : row.dataset.id);
  if (pageTop) window.scrollTo(0, 0);
  if (row && options.focus) row.focus({ preventScroll: true });
  setBusy();
  var result = { row: row, url: address };
  document.dispatchEvent(new CustomEvent("orders:opened", { detail: result }));
  opening.opened(result);
  return processed;
}

// Back and forward between entries open() made: show the list at that entry's address.
// (htmx restores its own entries, the boosted navigations, itself.)
window.addEventListener("popstate", function (evt) {
  var moved = listPath() !== shownPath;
  shownPath = listPath();
  if (evt.state && evt.state.htmx) {
    // htmx restores it, from the address as it reads it a task later (its before:history:restore
    // comes then): meanwhile the rows of the entry Back came from are still in view, and a place
    // noted from them (a throttled note due after a landing) rewrote this entry's address to one
    // of theirs, so Back restored where it came from. Nothing is noted until the restore is over.
    // (Between entries of one address, a row's #hash apart, Chromium's htmx restores nothing.)
    if (moved && table()) {
      clearTimeout(placeTimer);
      placeTimer = null;
      restoring = true;
    }
    return;
  }
  if (!opened || !table()) return;
  open(here(), { push: false });
});

// --- Start --------------------------------------------------------------------------------

// We put the reader back ourselves, at the row the address names: the browser's own restore
// of the old scroll offset would land somewhere else in a document that starts elsewhere.
if ("scrollRestoration" in history) history.scrollRestoration = "manual";

export function start() {
  goToNamedRow();
  notePlaceSoon();
}

export var api = {
  open: open,
  land: land,
  busy: busy,
  firstVisibleRow: firstVisibleRow,
  keepingPlace: keepingPlace,
  refresh: refresh,
  holdBelow: holdBelow,
  rows: ROWS,
};
