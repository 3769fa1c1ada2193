// The rail (templates/_rail.html; docs/finding.md, "The rail"): the whole list's shape along the
// right edge, each bucket (a month, week or day; an amount band; an initial) as tall as its share
// of the orders, the reader's place marked on it and moving as they scroll. Dragging the handle
// (a mouse, a finger) or pressing keys on the focused rail picks a bucket, its name in a bubble;
// releasing (or Enter, or a pause after the keys) opens the list at the bucket's first row in one
// request, by the scroll window's open() (the address names the row, Back returns). Nothing is
// asked while dragging. On a phone only a thumb-sized handle shows, while the reader scrolls.
//
// Built from the links the server rendered (the page without JavaScript has them as a list);
// after a jump the rail asks GET /api/orders/rail again (the ETag makes it a 304 until a count
// moves). It reads the reader's place from the scroll window's "orders:place" and
// "orders:opened" events, and the row's own cells. No inline style: sizes are CSS custom
// properties set through the CSSOM (the Content-Security-Policy allows our own sheets only).
import { announce } from "./dom.js";

var KEY_PAUSE_MS = 700;     // keys pick a bucket; the list opens after this pause (or Enter)
var AWAKE_MS = 1500;        // the phone's handle shows this long after the last scroll
var LABEL_GAP_PX = 18;      // a bucket's label shows when the one above is at least this far up

var links = null;           // the server's list of links (templates/_rail.html)
var rail = null;            // the slider
var buckets = [];           // {href, count, low, high, spanLow, spanHigh, label, short, start, share}
var value = 0;              // the bucket the slider names
var placeValue = 0;         // the bucket the reader is in
var placeAt = 0;            // the reader's place on the rail, 0 to 1
var dragging = false;
var dragBox = null;         // the rail's box when the drag began: should the sticky bar move
                            // meanwhile, the buckets under the finger stay (a finger on the rail
                            // is no scroll to the bar: controls.js)
var keyTimer = 0, awakeTimer = 0;
var etag = null;
var landedRow = null;       // the row a pause's jump landed on, while the rail keeps the focus

function kind() { return links.dataset.kind; }
function descending() { return links.dataset.descending === "1"; }

// Two significant figures, as the server rounds its estimates: a count that moves is "about".
function about(n) {
  if (n < 100) return String(n);
  var scale = Math.pow(10, Math.floor(Math.log10(n)) - 1);
  return "about " + (Math.round(n / scale) * scale).toLocaleString("en");
}
function valueText(b) { return b.label + ", " + about(b.count) + " order" + (b.count === 1 ? "" : "s"); }

// A value of the sort's first column, comparable with the buckets' bounds.
function parse(text) {
  if (text === "" || text == null) return null;
  if (kind() === "datetime") return Date.parse(text);
  if (kind() === "amount") return parseFloat(text);
  return text;
}

function setBuckets(list) {
  var total = list.reduce(function (sum, b) { return sum + b.count; }, 0) || 1;
  var start = 0;
  buckets = list.map(function (b) {
    var share = b.count / total;
    var out = Object.assign({}, b, {
      start: start, share: share, lowValue: parse(b.low), highValue: parse(b.high),
      // Where its orders lie (the server's span: a month with a week of orders is that week).
      spanLowValue: parse(b.spanLow), spanHighValue: parse(b.spanHigh),
    });
    start += share;
    return out;
  });
}

function fromLinks() {
  setBuckets(Array.prototype.map.call(links.querySelectorAll("a[data-count]"), function (a) {
    return {
      href: a.getAttribute("href"), count: +a.dataset.count, low: a.dataset.low, high: a.dataset.high,
      spanLow: a.dataset.spanLow, spanHigh: a.dataset.spanHigh, label: a.dataset.label, short: a.dataset.short,
    };
  }));
}

// --- The slider --------------------------------------------------------------------------------

function el(tag, cls) { var e = document.createElement(tag); e.className = cls; return e; }

function build() {
  rail = el("div", "rail");
  rail.id = "rail";
  rail.tabIndex = 0;
  rail.setAttribute("role", "slider");
  rail.setAttribute("aria-orientation", "vertical");
  rail.setAttribute("aria-label", links.dataset.title);
  rail.setAttribute("aria-valuemin", "0");
  rail.setAttribute("aria-keyshortcuts", "ArrowUp ArrowDown PageUp PageDown Home End Enter");
  var track = el("div", "rail-track");
  rail.appendChild(track);
  // What the slider says is its aria-valuetext; the drawing and the bubble repeat it.
  track.setAttribute("aria-hidden", "true");
  rail.appendChild(el("span", "rail-place"));
  rail.appendChild(el("span", "rail-handle"));
  rail.appendChild(el("span", "rail-bubble"));
  rail.querySelectorAll("span").forEach(function (s) { s.setAttribute("aria-hidden", "true"); });
  // Before the table in the document: the next Tab from the find bar, and the end of the list
  // still leads to the footer.
  var table = document.getElementById("orders");
  if (table) table.before(rail); else links.after(rail);
  draw();
}

function draw() {
  var track = rail.querySelector(".rail-track");
  track.textContent = "";
  buckets.forEach(function (b, i) {
    var part = el("span", "rail-bucket");
    part.style.setProperty("--n", String(b.count));
    part.dataset.index = String(i);
    part.dataset.count = String(b.count);
    var label = el("span", "rail-label");
    label.textContent = b.short;
    part.appendChild(label);
    track.appendChild(part);
  });
  rail.setAttribute("aria-valuemax", String(buckets.length - 1));
  requestAnimationFrame(labelWhereRoom);
  show(Math.min(value, buckets.length - 1), placeAt);
}

// Labels where there is room: a bucket's shows when the last shown one is far enough above.
function labelWhereRoom() {
  var last = -Infinity;
  rail.querySelectorAll(".rail-bucket").forEach(function (part) {
    var top = part.offsetTop;
    var room = top - last >= LABEL_GAP_PX;
    part.classList.toggle("has-label", room);
    if (room) last = top;
  });
}

// The slider names bucket `i`, its handle at `at` (0 to 1).
function show(i, at) {
  value = i;
  var b = buckets[i];
  rail.setAttribute("aria-valuenow", String(i));
  rail.setAttribute("aria-valuetext", b ? valueText(b) : "");
  // On the two elements that use it, not on the rail: a custom property set on the rail is
  // inherited by every bucket and label, each restyled with every move.
  var bubble = rail.querySelector(".rail-bubble");
  rail.querySelector(".rail-handle").style.setProperty("--at", String(at));
  bubble.style.setProperty("--at", String(at));
  bubble.textContent = b ? valueText(b) : "";
  rail.querySelectorAll(".rail-bucket.is-current").forEach(function (p) { p.classList.remove("is-current"); });
  var part = rail.querySelector('.rail-bucket[data-index="' + i + '"]');
  if (part) part.classList.add("is-current");
}
function middle(i) { return buckets[i].start + buckets[i].share / 2; }

function bucketAt(at) {
  for (var i = 0; i < buckets.length; i++) {
    if (at < buckets[i].start + buckets[i].share) return i;
  }
  return buckets.length - 1;
}

// --- Jumping: one request, on release ----------------------------------------------------------

// The focus after a jump, as after a go-to: on the landed row, so that the next Tab goes on from
// there (it went from the rail to the page's first row, about 40 rows above). Not after a pause
// of the keys: the reader may be picking on (a screen reader's reading of a bucket outlasts the
// pause), so the rail keeps the focus, and Tab from it goes to the landed row. Neither when the
// reader has since moved the focus (`had`: where it was when the jump began), or picks again.
function focusLanded(row, how, had) {
  var active = document.activeElement;
  var moved = active !== had && !!had && had.isConnected && active && active !== document.body;
  if (!row || keyTimer || moved) return;
  if (how === "pause") { landedRow = active === rail ? row : null; return; }
  row.focus({ preventScroll: true });
}
function tabToLanded(evt) {
  var row = landedRow;
  landedRow = null;
  if (!row || !row.isConnected || evt.shiftKey || evt.altKey || evt.ctrlKey || evt.metaKey) return;
  evt.preventDefault();
  (row.querySelector("a[href], button, [tabindex='0']") || row).focus({ preventScroll: true });
}

// `how`: "pointer" (a drag released), "enter" or "pause" (the keys).
function jump(i, how) {
  clearTimeout(keyTimer);
  keyTimer = 0;
  landedRow = null;
  var b = buckets[i];
  if (!b) return;
  var list = window.ordersList;
  if (!list || !list.open) { location.assign(b.href); return; }
  rail.classList.add("is-jumping");
  var had = document.activeElement;
  list.open(b.href, { focus: false }).then(function (result) {
    rail.classList.remove("is-jumping");
    var row = result.row;
    announce("Went to " + b.label + (row ? ": order #" + row.dataset.id : "") + ".", "find-status");
    show(i, b.start);
    focusLanded(row, how, had);
    refresh();
  }, function (err) {
    rail.classList.remove("is-jumping");
    announce("Could not go to " + b.label + ": " + err.message, "find-status");
    show(placeValue, placeAt);
  });
}

// --- Pointer: drag the handle (a mouse over the whole rail, a finger on the handle) -----------

function atPointer(evt) {
  var box = dragBox || rail.getBoundingClientRect();
  return Math.min(1, Math.max(0, (evt.clientY - box.top) / Math.max(1, box.height)));
}
function onDown(evt) {
  if (evt.button !== 0 || !buckets.length) return;
  evt.preventDefault();
  dragging = true;
  dragBox = rail.getBoundingClientRect();
  (evt.target.closest(".rail-handle") || rail).setPointerCapture(evt.pointerId);
  rail.classList.add("is-dragging");
  onMove(evt);
}
function onMove(evt) {
  if (!dragging) return;
  var at = atPointer(evt);
  show(bucketAt(at), at);
}
function onUp(evt) {
  if (!dragging) return;
  dragging = false;
  rail.classList.remove("is-dragging");
  var at = atPointer(evt);
  dragBox = null;
  jump(bucketAt(at), "pointer");
}
function onCancel() {
  if (!dragging) return;
  dragging = false;
  dragBox = null;
  rail.classList.remove("is-dragging");
  show(placeValue, placeAt);
}

// --- Keys on the focused rail: pick, then open after a pause (or Enter) -----------------------

var STEPS = { ArrowDown: 1, ArrowRight: 1, ArrowUp: -1, ArrowLeft: -1 };
function onKey(evt) {
  if (evt.key === "Tab") { tabToLanded(evt); return; }
  if (evt.altKey || evt.ctrlKey || evt.metaKey || !buckets.length) return;
  var last = buckets.length - 1, page = Math.max(1, Math.round(buckets.length / 10)), next = null;
  if (evt.key in STEPS) next = value + STEPS[evt.key];
  else if (evt.key === "PageDown") next = value + page;
  else if (evt.key === "PageUp") next = value - page;
  else if (evt.key === "Home") next = 0;
  else if (evt.key === "End") next = last;
  else if (evt.key === "Enter" || evt.key === " ") { evt.preventDefault(); evt.stopPropagation(); jump(value, "enter"); return; }
  else return;
  // The page's own keys (Home and End open Top and End, arrows move between rows) stay out.
  evt.preventDefault();
  evt.stopPropagation();
  next = Math.min(last, Math.max(0, next));
  show(next, middle(next));
  clearTimeout(keyTimer);
  landedRow = null;
  keyTimer = setTimeout(function () { jump(value, "pause"); }, KEY_PAUSE_MS);
}

// --- The reader's place --------------------------------------------------------------------------

function rowValue(row) {
  if (kind() === "datetime") {
    var time = row.querySelector("td.created time[datetime]");
    return time ? Date.parse(time.getAttribute("datetime")) : null;
  }
  if (kind() === "amount") {
    var cell = row.querySelector("td.amount");
    return cell ? parseFloat(cell.textContent.replace(/[^0-9.]/g, "")) : null;
  }
  var name = row.querySelector("td.customer");
  if (!name) return null;
  // Folded as the server folds names for the sort (orders/data/names.py), near enough for a mark.
  return name.textContent.normalize("NFKD").replace(/\p{M}/gu, "").trim().toLowerCase();
}

function place(row) {
  if (!row || !buckets.length || dragging) return;
  var v = rowValue(row);
  if (v === null || v !== v) return;
  for (var i = 0; i < buckets.length; i++) {
    var b = buckets[i];
    if ((b.lowValue === null || v >= b.lowValue) && (b.highValue === null || v < b.highValue)) {
      // Within the part of the bucket its orders fill, not its calendar month or whole band: the
      // newest order of a month of one week is at the bucket's top, not 80% down it.
      var low = b.spanLowValue !== null ? b.spanLowValue : b.lowValue;
      var high = b.spanHighValue !== null ? b.spanHighValue : b.highValue;
      var t = 0.5;
      if (typeof v === "number" && high !== null && high > low) {
        t = (v - low) / (high - low);
        if (descending()) t = 1 - t;
      }
      placeValue = i;
      placeAt = b.start + Math.min(1, Math.max(0, t)) * b.share;
      rail.querySelector(".rail-place").style.setProperty("--place", String(placeAt));
      rail.classList.add("has-place");
      if (!keyTimer || document.activeElement !== rail) show(i, placeAt);
      return;
    }
  }
}

// --- The counts again, by ETag: a 304 until a count moves --------------------------------------

function refresh() {
  var headers = { Accept: "application/json" };
  if (etag) headers["If-None-Match"] = etag;
  fetch(links.dataset.api, { credentials: "same-origin", cache: "no-store", headers: headers }).then(function (response) {
    if (response.status !== 200) return;
    etag = response.headers.get("ETag");
    return response.json().then(function (body) {
      if (!body.buckets.length) return;
      var base = links.dataset.list;
      var join = base.indexOf("?") >= 0 ? "&" : "?";
      setBuckets(body.buckets.map(function (b) {
        return {
          href: base + join + "after=" + b.cursor, count: b.count, low: b.low, high: b.high || "",
          spanLow: b.span_low, spanHigh: b.span_high || "", label: b.label, short: b.short,
        };
      }));
      draw();
    });
  }).catch(function () { /* the rail keeps what it had */ });
}

// --- Start --------------------------------------------------------------------------------------

function awake() {
  rail.classList.add("is-awake");
  clearTimeout(awakeTimer);
  awakeTimer = setTimeout(function () { rail.classList.remove("is-awake"); }, AWAKE_MS);
}

// Once per page, and again when htmx puts a new copy of the page in (Back from an order's page).
function init() {
  links = document.getElementById("rail-links");
  if (!links || document.getElementById("rail")) return;
  etag = null;
  value = 0;
  placeAt = 0;
  fromLinks();
  build();
  rail.addEventListener("pointerdown", onDown);
  rail.addEventListener("pointermove", onMove);
  rail.addEventListener("pointerup", onUp);
  rail.addEventListener("pointercancel", onCancel);
  rail.addEventListener("lostpointercapture", onCancel);
  rail.addEventListener("keydown", onKey);
  rail.addEventListener("blur", function () { landedRow = null; });
  var first = window.ordersList && window.ordersList.firstVisibleRow && window.ordersList.firstVisibleRow();
  place(first || document.querySelector("#rows > tr[data-id]"));
}

function live() { return rail && rail.isConnected; }
window.addEventListener("scroll", function () { if (live()) awake(); }, { passive: true });
window.addEventListener("resize", function () { if (live()) requestAnimationFrame(labelWhereRoom); });
document.addEventListener("orders:place", function (evt) { if (live()) place(evt.detail.row); });
document.addEventListener("orders:opened", function (evt) { if (live()) place(evt.detail.row); });
document.addEventListener("orders:restored", init);  // Back: htmx 4 swapped the body in again
document.addEventListener("htmx:after:swap", function () { if (!live()) init(); });
init();
