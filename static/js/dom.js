// The few facts about the page's markup that every part of the front end shares. The markup
// itself lives in the server's templates (templates/_rows.html, _sentinel.html, orders.html);
// when the browser must build a row, it clones one of the <template>s orders.html keeps.

export const ROWS = "#rows > tr[data-id]";

export function table() { return document.getElementById("orders"); }
export function body() { return document.getElementById("rows"); }
export function dataRows() { return document.querySelectorAll(ROWS); }
export function isRow(el) { return !!el && el.nodeType === 1 && el.hasAttribute("data-id"); }

export function firstRow() {
  var el = body() && body().firstElementChild;
  while (el && !isRow(el)) el = el.nextElementSibling;
  return el;
}
export function lastRow() {
  var el = body() && body().lastElementChild;
  while (el && !isRow(el)) el = el.previousElementSibling;
  return el;
}

// A copy of the first element of <template id="...">, the server's own markup.
export function fromTemplate(id) {
  return document.getElementById(id).content.firstElementChild.cloneNode(true);
}

// The top of the list area: the rows' scroll-margin-top (app.css: below the sticky find bar and
// column headers, whatever part of them is shown now; 0 without them). scrollIntoView honours it.
// Not the root's scroll-padding-top: with it, focusing a control in the sticky bar scrolled the
// list (the bar lies inside the padding, so the browser "revealed" it by scrolling up).
export function listTop() {
  var row = body() && body().firstElementChild;
  return row ? parseFloat(getComputedStyle(row).scrollMarginTop) || 0 : 0;
}

// This tab's sessionStorage, where the page keeps what a reload or Back needs (the go-to's row,
// the find bar's focused control, the row whose order was opened, the rows' offsets). A browser
// may refuse it (a sandbox, storage turned off, a full quota): then nothing is kept, and a reload
// or Back behaves as a first visit. One home for that rule; null and undefined remove the key.
export function stored(key) {
  try { return sessionStorage.getItem(key); } catch (e) { return null; }
}
export function store(key, value) {
  try {
    if (value === null || value === undefined) sessionStorage.removeItem(key);
    else sessionStorage.setItem(key, value);
  } catch (e) { /* not kept: see above */ }
}
// Read once: the value, and the key removed.
export function take(key) {
  var value = stored(key);
  if (value !== null) store(key, null);
  return value;
}

// Says `text` in the live region `id` (default: the list's; the find bar has its own, so that
// "20 earlier orders loaded" does not overwrite what a go-to did).
export function announce(text, id) {
  var live = document.getElementById(id || "announcer");
  if (!live) return;
  live.textContent = "";
  // A fresh text node after a tick makes screen readers announce repeated messages too.
  setTimeout(function () { live.textContent = text; }, 50);
}
