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

export function announce(text) {
  var live = document.getElementById("announcer");
  if (!live) return;
  live.textContent = "";
  // A fresh text node after a tick makes screen readers announce repeated messages too.
  setTimeout(function () { live.textContent = text; }, 50);
}
