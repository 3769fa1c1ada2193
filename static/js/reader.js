// The rows as a feed, for keys and thumbs (docs/scroll.md, "Keyboard like a feed"):
//   keys     with focus in the list, j/k and the arrow keys move focus row to row (the sentinels
//            load and drop rows as the focus goes; from "End of orders." k and Up go to the last
//            row), Enter opens the focused row, Page Up/Down move a screenful and focus the row
//            then on top (Down no further than the last row loaded)
//   a tap    anywhere on a card (phones: rows are cards below 52rem), or on a row on any touch
//            screen, opens that order; a long press still selects text (a click that ends a
//            selection opens nothing)
//   focus    never left on <body>: Back from an order (or its "Back to the list", Back itself
//            when it leads to the list the order was opened from) focuses the row that was
//            opened, and "N new orders · show" opens the list in place with focus on its first
//            row; a row reached by Tab or Shift+Tab is shown whole below the sticky bar
//   footer   html.rows-below while rows are still to come below (app.css hides the footer)
// It uses the scroll window's API only (open, firstVisibleRow; "orders:loaded").
import { ROWS, body, isRow, lastRow, listTop, store, take } from "./dom.js";
import { api as list } from "./scroll-window.js";

var OPENED = "reader-opened";  // sessionStorage: the row whose order the reader opened last
var NEXT = { j: 1, ArrowDown: 1 };
var PREVIOUS = { k: 1, ArrowUp: 1 };
var pending = 0;  // a move asked for past the last row loaded: done when rows arrive

function rowOf(el) {
  var row = el && el.closest ? el.closest(ROWS) : null;
  return row && row.parentElement === body() ? row : null;
}
function sibling(row, step) {
  var el = step > 0 ? row.nextElementSibling : row.previousElementSibling;
  while (el && !isRow(el)) el = step > 0 ? el.nextElementSibling : el.previousElementSibling;
  return el;
}

// `row` scrolled just enough to show it whole below the sticky bar (one read, one write).
function reveal(row) {
  var box = row.getBoundingClientRect(), top = listTop();
  var by = box.top < top ? Math.floor(box.top - top) : box.bottom > window.innerHeight ? Math.ceil(box.bottom - window.innerHeight) : 0;
  if (by) window.scrollBy(0, by);
}
function focusRow(row) {
  reveal(row);
  row.focus({ preventScroll: true });
}
// Tab and Shift+Tab onto a row's link: the browser scrolls only what lies outside the viewport,
// and under the sticky bar a link is inside it (a keyboard walk found 2 of every 10 Shift+Tab
// stops hidden). Keyboard focus only (:focus-visible): a click moves nothing.
document.addEventListener("focusin", function (evt) {
  var row = rowOf(evt.target);
  if (row && evt.target !== row && evt.target.matches(":focus-visible")) reveal(row);
});

// `steps` rows on (negative: back). Presses past the rows loaded are kept (pending) and done
// when the rows arrive: bringing the sentinel into view loads them.
function move(row, steps) {
  var dir = steps > 0 ? 1 : -1, target = row, next;
  while (steps && (next = sibling(target, dir))) { target = next; steps -= dir; }
  pending = steps;
  if (target !== row) focusRow(target);
  if (!steps) return;
  var control = dir > 0 ? row.parentElement.lastElementChild : row.parentElement.firstElementChild;
  if (!control || isRow(control)) { pending = 0; return; }  // the end of the list
  window.scrollBy(0, dir * target.getBoundingClientRect().height);
}
document.addEventListener("orders:loaded", function (evt) {
  var active = rowOf(document.activeElement);
  if (!pending || !active || (evt.detail.up !== (pending < 0))) return;
  move(active, pending);
});

// A screenful less a row, then the row on top shown whole: the scroll ends anywhere in a row, and
// the first row in view, focused as it lay, had up to all but a pixel of it under the headers.
// Down goes no further than the last row loaded, on top: past it lies only the next page's
// skeleton, no row to focus, and the focus stayed on a row then above the screen (a reader's 2nd
// Page Down in WebKit, whose next page came later than the key; a held key in every engine). The
// skeleton in view loads that page, and the next key goes on from the last row. Up needs no
// bound: above the rows loaded, the first of them is the first row in view (shown whole).
function screenful(step) {
  pending = 0;  // a move past the rows loaded, given up for this one
  var by = step * Math.max(1, window.innerHeight - listTop() - 48);
  var last = step > 0 ? lastRow() : null;
  if (last) by = Math.min(by, Math.max(0, Math.floor(last.getBoundingClientRect().top - listTop())));
  if (by) window.scrollBy(0, by);
  var row = list.firstVisibleRow() || last;
  if (row) focusRow(row);
}

// The end of the list ("End of orders.", where End puts the focus): the keys back go on from
// there, to the last row and up, Page Up a screenful up (there is nothing below it).
function atEnd(el) { return !!el && el.id === "end-of-list" && el.parentElement === body(); }

// On window, after the document's listeners: the find bar (controls.js) tucks or comes back for
// the key there first, so the row is shown below the bar as the key leaves it. (Before, Page Up
// focused a row below the tucked bar, and the bar then came back over it, hiding it whole.)
window.addEventListener("keydown", function (evt) {
  if (evt.altKey || evt.ctrlKey || evt.metaKey || evt.shiftKey) return;
  var up = PREVIOUS[evt.key] || evt.key === "PageUp";
  var last = up && atEnd(evt.target) ? sibling(evt.target, -1) : null;
  if (last) {
    evt.preventDefault();
    // Page Up as from the last row (the browser's own scroll left the focus below the screen).
    if (evt.key === "PageUp") screenful(-1);
    else focusRow(last);
    return;
  }
  var row = rowOf(evt.target);
  if (!row) return;
  var onLink = evt.target !== row;
  if (NEXT[evt.key] || PREVIOUS[evt.key]) {
    evt.preventDefault();
    var dir = NEXT[evt.key] ? 1 : -1;
    move(row, pending && (pending > 0) === (dir > 0) ? pending + dir : dir);
  } else if (evt.key === "PageDown" || evt.key === "PageUp") {
    evt.preventDefault();
    screenful(evt.key === "PageDown" ? 1 : -1);
  } else if (evt.key === "Enter" && !onLink) {
    evt.preventDefault();
    var link = row.querySelector("a[href]");
    if (link) link.click();
  }
});

// A tap on a card, anywhere: its order; on a touch screen a row too (a landscape phone shows
// table rows, where a tap on the name did nothing). Not with a mouse on desktop rows (a table's
// cells are for reading and selecting), not on a link or button (they do their own), not when
// the click ends a selection (a long press still selects).
var cards = window.matchMedia("(max-width: 52rem), (pointer: coarse)");
document.addEventListener("click", function (evt) {
  var row = rowOf(evt.target);
  if (!row) return;
  var link = row.querySelector("a[href]");
  if (link && evt.target.closest("a[href], button") === link) remember(row);
  if (!cards.matches || evt.target.closest("a[href], button") || evt.button !== 0) return;
  var selection = window.getSelection();
  if (selection && !selection.isCollapsed && row.contains(selection.anchorNode)) return;
  if (link) { remember(row); link.click(); }
});

function remember(row) {
  var link = row.querySelector("a[href]");
  left = link ? { list: addressOf(location.href), order: new URL(link.href, location.href).pathname } : null;
  store(OPENED, row.dataset.id);  // without storage: no focus back
}

// "← Back to the list" on an order's page (templates/order.html, order_gone.html) is Back itself
// when it leads to the list this document left for that order: the list comes back as Back
// brings it (the same entry, the rows where the reader left them, the bar as it was, the opened
// row focused). Followed as a link, its address (the list's, naming the first row in view) opened
// a new page that took that row for a go-to's: focused, highlighted, and the bar back in full.
// Otherwise (the order opened another way, or its page reloaded) it is the plain link it is
// without JavaScript.
var left = null;  // {list, order}: the list's address when a row's order was opened, and its path
function addressOf(url) {
  var u = new URL(url, location.href);
  return u.pathname + u.search + u.hash;
}
document.addEventListener("click", function (evt) {
  var back = evt.target.closest && evt.target.closest("a.back-link[href]");
  if (!back || !left || evt.button !== 0 || evt.metaKey || evt.ctrlKey || evt.shiftKey || evt.altKey) return;
  if (location.pathname !== left.order || addressOf(back.href) !== left.list) return;
  evt.preventDefault();
  history.back();
});
// Back from an order (also after the order's page was reloaded): the row that was opened has the
// focus. The list comes back at the first row that was in view (the address names it) and draws
// from the start of that row's page, so at depth the opened row, lower on the screen, may come
// with the next page: until it does, the first row in view holds the focus (never <body>), and
// the opened row takes it when it arrives, unless the reader has moved on meanwhile.
var returning = null;  // the opened row's id, until it has the focus or the reader moves
function focusReturned() {
  var id = take(OPENED);
  if (!id || !body()) return;
  returning = id;
  focusOpened();
}
function focusOpened() {
  if (!returning) return;
  var row = document.getElementById("order-" + returning);
  if (row && isRow(row)) {
    returning = null;
    row.focus({ preventScroll: true });
    return;
  }
  var active = document.activeElement;
  if (!active || active === document.body) {
    var first = list.firstVisibleRow();
    if (first) first.focus({ preventScroll: true });
  }
  // Nothing more to come below (the end of the list): the row is gone (deleted meanwhile).
  if (!document.getElementById("more")) returning = null;
}
document.addEventListener("orders:restored", focusReturned);
document.addEventListener("orders:loaded", function (evt) { if (!evt.detail.up) focusOpened(); });
["keydown", "pointerdown", "wheel", "touchstart"].forEach(function (name) {
  window.addEventListener(name, function () { returning = null; }, { capture: true, passive: true });
});

// "N new orders · show": the list at its top in place (one request), focus on its first row.
document.addEventListener("click", function (evt) {
  var banner = evt.target.closest && evt.target.closest("#new-orders a.banner");
  if (!banner || evt.button !== 0 || evt.metaKey || evt.ctrlKey || evt.shiftKey) return;
  evt.preventDefault();
  list.open(banner.href, { focus: true }).catch(function () { location.href = banner.href; });
});

// "Skip to the orders" (the first Tab stop): the first row in view takes the focus (the next
// keys go row to row from there), or, with no row, the table itself (its caption is read out).
// Without JavaScript the link goes to <main>, which takes the focus (tabindex="-1").
document.addEventListener("click", function (evt) {
  var skip = evt.target.closest && evt.target.closest("a.skip-link");
  var table = document.getElementById("orders");
  if (!skip || !table) return;
  evt.preventDefault();
  var row = list.firstVisibleRow();
  if (row) { row.focus({ preventScroll: true }); return; }
  if (!table.hasAttribute("tabindex")) table.setAttribute("tabindex", "-1");
  table.focus({ preventScroll: true });
});

// html.rows-below while a sentinel waits below the rows (app.css hides the footer meanwhile):
// checked once per batch of changes to the list, whichever part made them.
function rowsBelow() {
  var last = body() && body().lastElementChild;
  var below = !!last && last.matches(".sentinel:not(.paused)");
  document.documentElement.classList.toggle("rows-below", below);
}
document.addEventListener("orders:rows-changed", rowsBelow);

export function start() {
  // The body, not <main>: htmx swaps what is inside the body (Back, boosted links), not the body.
  new MutationObserver(rowsBelow).observe(document.body, { childList: true, subtree: true });
  rowsBelow();
  var nav = performance.getEntriesByType && performance.getEntriesByType("navigation")[0];
  if (nav && nav.type === "back_forward") focusReturned();
}
