// The find bar (templates/orders.html; docs/finding.md): sticky controls that know their height,
// Top and End (and the Home/End keys), "go to" that lands exactly on its row, sort and status
// that never navigate on a keyboard change, and where the reader is. It uses only the scroll
// window's API (window.ordersList: open, land, refresh; the "orders:place" event); without
// JavaScript every control is a plain link or GET form.
var list = window.ordersList;
// Looked up each time: htmx's history restore (Back) puts a new copy of the bar in the page.
function findBar() { return document.getElementById("find-bar"); }

function announce(text) {
  var live = document.getElementById("find-status");
  if (!live) return;
  live.textContent = "";
  setTimeout(function () { live.textContent = text; }, 50);
}

// --- Sticky: the list area starts below the bar and the column headers ------------------------

function inset() {
  return parseFloat(getComputedStyle(document.documentElement).scrollPaddingTop) || 0;
}
function measure() {
  var bar = findBar();
  if (!bar) return;
  var root = document.documentElement;
  // The row first in view keeps its place below the bar when the bar changes height (it is in
  // the page's flow: a wrap, a message, the position shown would push the rows).
  var anchor = list && window.scrollY > 0 ? list.firstVisibleRow() : null;
  var before = anchor ? anchor.getBoundingClientRect().top - inset() : 0;
  // Fractional heights: rounded ones put a landed row a pixel or two under the headers.
  root.style.setProperty("--find-bar-h", bar.getBoundingClientRect().height + "px");
  var head = document.querySelector("#orders thead");
  var headHeight = head && getComputedStyle(head).display !== "none" ? head.getBoundingClientRect().height : 0;
  root.style.setProperty("--find-head-h", headHeight + "px");
  // Inline on the root too (htmx never swaps <html>): the top of the list area holds while a
  // restored page's stylesheet is still being applied.
  root.style.scrollPaddingTop = "calc(var(--find-bar-h) + var(--find-head-h))";
  if (list) list.refresh();
  if (anchor && anchor.isConnected) {
    var shift = anchor.getBoundingClientRect().top - inset() - before;
    if (Math.abs(shift) >= 0.5) window.scrollBy(0, shift);
  }
}
var observer = "ResizeObserver" in window ? new ResizeObserver(measure) : null;
function watchBar() {
  var bar = findBar();
  if (observer) { observer.disconnect(); if (bar) observer.observe(bar); }
  measure();
}
watchBar();
document.addEventListener("htmx:historyRestore", watchBar);

// --- The row a go to landed on: highlighted, focused, announced ---------------------------------

function describe(row) {
  var cells = row.querySelectorAll("td");
  return Array.prototype.map.call(cells, function (td) { return td.textContent.trim(); }).join(", ");
}
function mark(row, why) {
  document.querySelectorAll("#rows tr.is-target").forEach(function (r) { r.classList.remove("is-target"); });
  if (!row) return;
  row.classList.add("is-target");
  row.setAttribute("aria-current", "location");
  row.focus({ preventScroll: true });
  announce(why + ": order " + describe(row) + ".");
}

// Opens `url` in place (one request) and returns what open() resolves to; failures are shown
// by the caller.
function openList(url, options) {
  if (!list) { location.href = url; return Promise.reject(new Error("no scroll window")); }
  return list.open(url, options || {});
}

// --- Go to: the exact row at the top of the list area, the value kept, an inline message ------

document.addEventListener("submit", function (evt) {
  var form = evt.target;
  if (!list || !form.matches || !form.matches("form.jump")) return;
  evt.preventDefault();
  var input = form.querySelector('[name="to"]');
  var message = document.getElementById("jump-message");
  var url = form.action + "?" + new URLSearchParams(new FormData(form)).toString();
  input.removeAttribute("aria-invalid");
  message.textContent = "";
  openList(url, { focus: true }).then(function (result) {
    mark(result.row, "Went to " + input.value);
    if (!result.row) message.textContent = "No orders there.";
  }, function (err) {
    input.setAttribute("aria-invalid", "true");
    message.textContent = err.status === 400 ? err.message : "Could not go there: " + err.message;
    input.focus();
  });
});

// --- Top and End (and the Home / End keys when focus is not in a field) -----------------------

function goEnd(which) {
  var bar = findBar();
  var link = bar && bar.querySelector('[data-find="' + which + '"]');
  if (!link) return;
  openList(link.href, { focus: false }).then(function (result) {
    if (which === "top") {
      announce("The first orders of the list.");
    } else {
      var rows = document.querySelectorAll(list.rows);
      var last = rows[rows.length - 1];
      if (last) list.land(last.dataset.id);  // as far up as the document allows: the end in view
      // Focus on the end of the list: the next Tab is the footer, not every row above it again.
      var end = document.getElementById("end-of-list");
      if (end) end.focus({ preventScroll: true });
      announce("The last orders of the list.");
    }
    mark(null);
    return result;
  }, function (err) { announce("Could not open the list: " + err.message); });
}
document.addEventListener("click", function (evt) {
  var link = evt.target.closest && evt.target.closest("#find-bar [data-find]");
  if (!link || !list || evt.button !== 0 || evt.metaKey || evt.ctrlKey || evt.shiftKey) return;
  evt.preventDefault();
  goEnd(link.dataset.find);
});
function inField(el) {
  return el && (el.isContentEditable || /^(INPUT|SELECT|TEXTAREA|BUTTON)$/.test(el.tagName));
}
document.addEventListener("keydown", function (evt) {
  if ((evt.key !== "Home" && evt.key !== "End") || evt.altKey || evt.ctrlKey || evt.metaKey) return;
  if (inField(evt.target)) return;
  evt.preventDefault();
  goEnd(evt.key === "Home" ? "top" : "end");
});

// --- Sort and status: Apply, or a pointer's choice; never a keyboard change --------------------

var pointerChoice = new WeakSet();
document.addEventListener("pointerdown", function (evt) {
  var select = evt.target.closest && evt.target.closest("form.controls select");
  if (select) pointerChoice.add(select);
});
document.addEventListener("keydown", function (evt) {
  if (evt.target.matches && evt.target.matches("form.controls select")) pointerChoice.delete(evt.target);
});
document.addEventListener("change", function (evt) {
  var select = evt.target;
  var form = select.closest && select.closest("form.controls");
  if (!form) return;
  if (pointerChoice.has(select)) { form.requestSubmit(); return; }
  announce("Press Apply to show the list with this choice.");
});
// Focus comes back to the control after the new page loads.
document.addEventListener("submit", function (evt) {
  var form = evt.target;
  if (!form.matches || !form.matches("form.controls, form.search")) return;
  var active = document.activeElement;
  var name = active && active.name ? active.name : evt.submitter && evt.submitter.classList.contains("apply") ? "apply" : "";
  try { sessionStorage.setItem("find-focus", form.className + "|" + name); } catch (e) { /* no storage */ }
});
(function restoreFocus() {
  var saved = null;
  try { saved = sessionStorage.getItem("find-focus"); sessionStorage.removeItem("find-focus"); } catch (e) { return; }
  if (!saved) return;
  var parts = saved.split("|");
  var bar = findBar();
  var form = bar && bar.querySelector("form." + parts[0].split(" ")[0]);
  if (!form) return;
  var el = parts[1] === "apply" ? form.querySelector(".apply") : parts[1] && form.querySelector('[name="' + parts[1] + '"]');
  (el || form.querySelector("select, input:not([type=hidden])")).focus({ preventScroll: true });
})();

// A search for an order that is not there: the box keeps the number and says so.
(function searchMessage() {
  var bar = findBar();
  var input = bar && bar.querySelector('form.search [aria-invalid="true"]');
  if (input) input.focus({ preventScroll: true });
})();

// --- Where the reader is: the date, amount or initial of the first row in view ----------------

function positionBox() { return document.getElementById("find-position"); }
var dayFormat = new Intl.DateTimeFormat(undefined, { year: "numeric", month: "short", day: "numeric" });
function initial(name) {
  var plain = name.normalize("NFKD").replace(/\p{M}/gu, "").trim();
  return plain ? plain[0].toUpperCase() : "";
}
function showPosition(row) {
  var position = positionBox(), bar = findBar();
  if (!position || !row || !bar) return;
  var kind = bar.dataset.goto;
  var text = "";
  if (kind === "datetime") {
    var time = row.querySelector("time[datetime]");
    if (time) text = "around " + dayFormat.format(new Date(time.getAttribute("datetime")));
  } else if (kind === "amount") {
    var amount = row.querySelector("td.amount");
    if (amount) text = "at " + amount.textContent.trim();
  } else {
    var customer = row.querySelector("td.customer");
    if (customer) text = "at " + initial(customer.textContent) + "…";
  }
  position.textContent = text;
  position.hidden = !text;
}
document.addEventListener("orders:place", function (evt) { showPosition(evt.detail.row); });
document.addEventListener("orders:opened", function (evt) { showPosition(evt.detail.row); });

// Opened at a named row (reload, shared link after a go to): mark it too.
(function markNamed() {
  var match = /^#order-(\d+)$/.exec(location.hash);
  if (!match) { if (list) showPosition(list.firstVisibleRow()); return; }
  var row = document.getElementById("order-" + match[1]);
  if (!row) return;
  row.classList.add("is-target");
  showPosition(row);
  // The scroll window landed it before the bar was measured (this module runs after it): again,
  // now that the top of the list area is known.
  if (list) list.land(match[1]);
})();
