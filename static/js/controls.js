// The find bar (templates/orders.html; docs/finding.md): sticky controls that know their height
// and tuck away while the reader scrolls down, Top and End (and the Home/End keys), "go to" that
// lands exactly on its row, sort and status that never navigate on a keyboard change, the forms
// folded away on a short screen (a landscape phone) until asked for, and where
// the reader is. It uses only the scroll window's API (open, land, refresh, firstVisibleRow, holdBelow; the
// "orders:place" event); without JavaScript every control is a plain link or GET form.
import { announce as say, listTop as inset, store, stored, take } from "./dom.js";
import { api as list } from "./scroll-window.js";

// Looked up each time: htmx's history restore (Back) puts a new copy of the bar in the page.
function findBar() { return document.getElementById("find-bar"); }
function announce(text) { say(text, "find-status"); }

// --- Sticky: the list area starts below the bar and the column headers ------------------------

function measure() {
  var bar = findBar();
  if (!bar) return;
  var root = document.documentElement;
  // The row first in view keeps its place below the bar when the bar changes height (it is in
  // the page's flow: a wrap, a message, the position shown would push the rows).
  var anchor = window.scrollY > 0 ? list.firstVisibleRow() : null;
  var before = anchor ? anchor.getBoundingClientRect().top - inset() : 0;
  if (Math.abs(before) <= 1) before = 0;  // a row on top stays on top (no sub-pixel drift to add up)
  // Fractional heights: rounded ones put a landed row a pixel or two under the headers.
  root.style.setProperty("--find-bar-h", bar.getBoundingClientRect().height + "px");
  var head = document.querySelector("#orders thead");
  var headHeight = head && getComputedStyle(head).display !== "none" ? head.getBoundingClientRect().height : 0;
  root.style.setProperty("--find-head-h", headHeight + "px");
  // Tucked, the bar keeps its last line (where the reader is) in view; the rest goes above.
  var place = bar.querySelector(".find-place");
  var tuck = place ? place.getBoundingClientRect().top - bar.getBoundingClientRect().top - 4 : 0;
  root.style.setProperty("--find-tuck", Math.max(0, tuck) + "px");
  list.refresh();
  if (anchor && anchor.isConnected) {
    var shift = anchor.getBoundingClientRect().top - inset() - before;
    // To the nearest whole pixel the page can scroll to (scrollBy drops the fraction: after a
    // resize's own correction that left the row more than a pixel off, seen at 844x390).
    if (Math.abs(shift) >= 0.5) window.scrollTo(window.scrollX, Math.round(window.scrollY + shift));
  }
}
// measure() runs after the browser laid the new height out: it finds the row where the browser's
// CSS scroll anchoring kept it (Chromium, Firefox). WebKit has none, and every row had already
// moved with the bar (opening the folded forms at 844x390 put the row in view 191 px lower, the
// forms' height). So there, whatever changes the bar's height keeps that row in place itself,
// before measure() runs (the scroll window's own read before, scroll after, to a whole pixel).
var anchoring = !!(window.CSS && CSS.supports && CSS.supports("overflow-anchor", "auto"));
function keepingRows(change) {
  if (anchoring || window.scrollY <= 0) change();
  else list.keepingPlace(change);
}
var observer = "ResizeObserver" in window ? new ResizeObserver(measure) : null;
function watchBar() {
  var bar = findBar();
  if (observer) { observer.disconnect(); if (bar) observer.observe(bar); }
  measure();
}
watchBar();
document.addEventListener("orders:restored", watchBar);

// --- Short screens: the forms fold away until asked for (controls.css) -------------------------

function openForms(yes) {
  var bar = findBar();
  var toggle = bar && bar.querySelector(".find-toggle");
  if (!toggle) return;
  keepingRows(function () { bar.classList.toggle("is-open", yes); });
  toggle.setAttribute("aria-expanded", yes ? "true" : "false");
}
document.addEventListener("click", function (evt) {
  var toggle = evt.target.closest && evt.target.closest("#find-bar .find-toggle");
  if (toggle) openForms(toggle.getAttribute("aria-expanded") !== "true");
});

// --- Tucked while the reader scrolls down, back when they scroll up --------------------------
// Decided by the reader's own input (wheel, finger, keys), never by a scroll the script made
// (landing on a row, keeping the place while rows arrive above), so the bar does not flicker
// while rows load. Focus in the bar (Tab, a click) or "/" (the search box) bring it back first,
// so nothing focused is ever out of view and focusing scrolls nothing.
function tucked(yes) {
  var root = document.documentElement;
  // Only on the list: an order's page (boosted, same <html>) leaves the state for Back to find.
  if (!findBar()) return;
  if (yes && window.scrollY <= 0) yes = false;
  if (root.classList.contains("bar-tucked") === yes) return;
  root.classList.toggle("bar-tucked", yes);
  // Inline as well (htmx never swaps <html>): it holds while a restored page's sheets load.
  root.style.setProperty("--tuck", yes ? "var(--find-tuck)" : "0px");
  list.refresh();
}
window.addEventListener("wheel", function (evt) {
  if (evt.deltaY) tucked(evt.deltaY > 0 && !evt.ctrlKey);
}, { passive: true });
// A finger on the rail's handle (rail.js) drags the handle, not the page: moving it down is no
// scroll up, and bringing the bar back mid-drag moved the rail (it hangs below the bar) away from
// under the finger. Such a touch is not followed.
var touchY = null;
window.addEventListener("touchstart", function (evt) {
  var onRail = evt.target.closest && evt.target.closest("#rail");
  touchY = onRail ? null : evt.touches[0].clientY;
}, { passive: true });
window.addEventListener("touchmove", function (evt) {
  var y = evt.touches[0].clientY;
  if (touchY !== null && Math.abs(y - touchY) > 8) { tucked(y < touchY); touchY = y; }
}, { passive: true });
// On document: reader.js moves the focus for these keys on window, after this, so the row it
// shows is below the bar as the key leaves it.
var DOWN = { ArrowDown: 1, PageDown: 1, End: 1, j: 1, " ": 1 };
var UP = { ArrowUp: 1, PageUp: 1, Home: 1, k: 1 };
document.addEventListener("keydown", function (evt) {
  if (inField(evt.target) || evt.altKey || evt.ctrlKey || evt.metaKey) return;
  if (evt.key === "/") {
    var search = findBar() && findBar().querySelector('form.search input[name="q"]');
    if (search) { evt.preventDefault(); tucked(false); openForms(true); search.focus(); }
    return;
  }
  if (DOWN[evt.key] && !(evt.key === " " && evt.shiftKey)) tucked(true);
  else if (UP[evt.key] || (evt.key === " " && evt.shiftKey)) tucked(false);
});
// Focus on a control of the tucked bar (Tab, Shift+Tab, a script's focus()): Chromium scrolls
// the page to bring the control into view before focusin is dispatched (545 px on a phone, and
// for a sticky bar that does not even reveal it). Bringing the bar back reveals it; the page goes
// back to where the reader had it, as the last scroll event saw it (the focus's own scroll event
// comes a frame later), before anything is painted.
var readerY = window.scrollY;
document.addEventListener("focusin", function (evt) {
  if (!(evt.target.closest && evt.target.closest("#find-bar"))) return;
  var wasTucked = document.documentElement.classList.contains("bar-tucked");
  tucked(false);
  if (wasTucked && window.scrollY !== readerY) window.scrollTo(window.scrollX, readerY);
});
window.addEventListener("scroll", function () {
  readerY = window.scrollY;
  if (window.scrollY <= 0) tucked(false);
}, { passive: true });

// --- The row a go to landed on: highlighted, focused, announced ---------------------------------

function describe(row) {
  var cells = row.querySelectorAll("td");
  return Array.prototype.map.call(cells, function (td) { return td.textContent.trim(); }).join(", ");
}
// The row a go-to landed on, kept for this tab (sessionStorage): a reload marks it again while the
// address names it, and no other row. (Not in history.state: htmx 4 writes its own state there,
// `{htmx: true}`, over whatever the entry held.)
var GOTO_TARGET = "orders-goto-target";
function target(id) { store(GOTO_TARGET, id || null); }  // without storage a reload marks nothing
function wasTarget(id) { return stored(GOTO_TARGET) === id; }
function mark(row, why) {
  document.querySelectorAll("#rows tr.is-target").forEach(function (r) { r.classList.remove("is-target"); });
  target(row && row.dataset.id);
  if (!row) return;
  row.classList.add("is-target");
  row.setAttribute("aria-current", "location");
  row.focus({ preventScroll: true });
  announce(why + ": order " + describe(row) + ".");
}

// Opens `url` in place (one request) and returns what open() resolves to; failures are shown
// by the caller.
function openList(url, options) {
  tucked(false);
  return list.open(url, options || {});
}

// A date (and time) typed in the reader's zone: the server is told that zone's offset from UTC
// on that day, as Date.getTimezoneOffset gives it (without JavaScript both are UTC).
function zoneOffset(value) {
  var m = /^\s*([0-9]{4})-([0-9]{2})-([0-9]{2})(?:[T ]([0-9]{2}):([0-9]{2}))?/.exec(value);
  if (!m) return null;
  var when = new Date(+m[1], +m[2] - 1, +m[3], +(m[4] || 0), +(m[5] || 0));
  return isNaN(when) ? null : when.getTimezoneOffset();
}

// --- Go to: the exact row at the top of the list area, the value kept, an inline message ------

document.addEventListener("submit", function (evt) {
  var form = evt.target;
  if (!form.matches || !form.matches("form.jump")) return;
  evt.preventDefault();
  var input = form.querySelector('[name="to"]');
  var message = document.getElementById("jump-message");
  var args = new URLSearchParams(new FormData(form));
  var offset = input.hasAttribute("data-local-time") ? zoneOffset(input.value) : null;
  if (offset !== null) args.set("tz", String(offset));
  var url = form.action + "?" + args.toString();
  input.removeAttribute("aria-invalid");
  message.textContent = "";
  openList(url, { focus: true }).then(function (result) {
    mark(result.row, "Went to " + input.value);
    if (!result.row) message.textContent = "No orders there.";
  }, function (err) {
    input.setAttribute("aria-invalid", "true");
    message.textContent = err.status === 400 ? err.message : "Could not go there: " + err.message;
    input.focus({ preventScroll: true });
  });
});

// The message answers what was typed: editing the field (or a press elsewhere in the page, the
// message itself included, but not in the field or on Go) puts it away; the field stays marked
// invalid until it is edited. It lies over the bar's own top (controls.css), which it would
// otherwise hide for as long as the page is open.
function clearJumpMessage(keepInvalid) {
  var message = document.getElementById("jump-message");
  if (message && message.textContent) message.textContent = "";
  if (keepInvalid) return;
  var input = findBar() && findBar().querySelector('form.jump [name="to"]');
  if (input) input.removeAttribute("aria-invalid");
}
document.addEventListener("input", function (evt) {
  if (evt.target.closest && evt.target.closest("form.jump")) clearJumpMessage(false);
});
document.addEventListener("pointerdown", function (evt) {
  if (evt.target.closest && evt.target.closest("form.jump label, form.jump button")) return;
  clearJumpMessage(true);
}, { passive: true });

// --- Top and End (and the Home / End keys when focus is not in a field) -----------------------

// The footer at any depth, in one action: the rows below wait (else they would arrive above the
// footer and push it away) until the reader scrolls on, and the footer comes into view with the
// focus (its links are the next Tab).
function toFooter() {
  list.holdBelow();
  var footer = document.getElementById("site-footer");
  footer.scrollIntoView({ block: "end" });
  footer.focus({ preventScroll: true });
}

function goEnd(which) {
  var bar = findBar();
  var link = bar && bar.querySelector('[data-find="' + which + '"]');
  if (!link) return;
  if (which === "footer") { toFooter(); return; }
  // Top focuses the first row, as End focuses the end: the next key goes on from there.
  openList(link.href, { focus: which === "top", top: which === "top" }).then(function (result) {
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
  if (!link || evt.button !== 0 || evt.metaKey || evt.ctrlKey || evt.shiftKey) return;
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
// A status chosen by keys waits for Apply; meanwhile its box shows the name alone, as an applied
// status's does (templates/orders.html), and the count is said: at 390 px "Paid (about 75,000)"
// showed as "Paid (about". The other choices keep their counts.
var ABOUT = / \((about [^)]*)\)$/;
function nameAlone(select) {
  Array.prototype.forEach.call(select.options, function (option) {
    if (option.dataset.full == null) option.dataset.full = option.text;
    option.text = option.selected ? option.dataset.full.replace(ABOUT, "") : option.dataset.full;
  });
}
document.addEventListener("change", function (evt) {
  var select = evt.target;
  var form = select.closest && select.closest("form.controls");
  if (!form) return;
  if (pointerChoice.has(select)) { form.requestSubmit(); return; }
  var count = "";
  if (select.name === "status") {
    nameAlone(select);
    var about = ABOUT.exec(select.options[select.selectedIndex].dataset.full);
    if (about) count = about[1] + " orders. ";
  }
  announce(count + "Press Apply to show the list with this choice.");
});
// Focus comes back to the control after the new page loads.
document.addEventListener("submit", function (evt) {
  var form = evt.target;
  if (!form.matches || !form.matches("form.controls, form.search")) return;
  var active = document.activeElement;
  var name = active && active.name ? active.name : evt.submitter && evt.submitter.classList.contains("apply") ? "apply" : "";
  store("find-focus", form.className + "|" + name);
});
(function restoreFocus() {
  var saved = take("find-focus");
  if (!saved) return;
  var parts = saved.split("|");
  var bar = findBar();
  var form = bar && bar.querySelector("form." + parts[0].split(" ")[0]);
  if (!form) return;
  openForms(true);  // folded away on a short screen: the control must be there to take the focus
  var el = parts[1] === "apply" ? form.querySelector(".apply") : parts[1] && form.querySelector('[name="' + parts[1] + '"]');
  (el || form.querySelector("select, input:not([type=hidden])")).focus({ preventScroll: true });
})();

// A search for an order that is not there: the box keeps the number and says so.
(function searchMessage() {
  var bar = findBar();
  var input = bar && bar.querySelector('form.search [aria-invalid="true"]');
  if (input) { openForms(true); input.focus({ preventScroll: true }); }
})();

// --- Where the reader is: the date, amount or initial of the first row in view ----------------

function positionBox() { return document.getElementById("find-position"); }
var dayFormat = new Intl.DateTimeFormat(undefined, { year: "numeric", month: "short", day: "numeric" });
function initial(name) {
  var plain = name.normalize("NFKD").replace(/\p{M}/gu, "").trim();
  return plain ? plain[0].toUpperCase() : "";
}
// The cell and how it is shown come from the server (orders/finding/goto.py GOTO_FIELDS, by the sort's
// go-to kind), rendered on the bar.
function showPosition(row) {
  var position = positionBox(), bar = findBar();
  if (!position || !row || !bar) return;
  var cell = row.querySelector("td." + bar.dataset.positionCell);
  var shown = bar.dataset.positionShown;
  var text = "";
  var time = cell && cell.querySelector("time[datetime]");
  if (shown === "day" && time) text = "around " + dayFormat.format(new Date(time.getAttribute("datetime")));
  else if (shown === "initial" && cell) text = "at " + initial(cell.textContent) + "…";
  else if (cell) text = "at " + cell.textContent.trim();
  // Unchanged (a day's rows, page after page): not written, so the bar is not laid out again.
  if (position.textContent !== text) position.textContent = text;
  if (position.hidden !== !text) position.hidden = !text;
}
document.addEventListener("orders:place", function (evt) { showPosition(evt.detail.row); });
document.addEventListener("orders:opened", function (evt) { showPosition(evt.detail.row); });

// Opened at a named row: marked when the address was made for it (a link opened afresh: shared,
// typed, bookmarked) or a go-to landed on it (reloaded); not the row a reload or Back finds where
// the reader had scrolled, which the address named only to keep the place. The navigation's type
// tells a link opened from a reload or a step through history.
(function markNamed() {
  var match = /^#order-(\d+)$/.exec(location.hash);
  if (!match) { showPosition(list.firstVisibleRow()); return; }
  var row = document.getElementById("order-" + match[1]);
  if (!row) return;
  var nav = performance.getEntriesByType ? performance.getEntriesByType("navigation")[0] : null;
  var again = nav && (nav.type === "reload" || nav.type === "back_forward");
  if (!again || wasTarget(match[1])) row.classList.add("is-target");
  showPosition(row);
  // The scroll window landed it before the bar was measured (this module runs after it): again,
  // now that the top of the list area is known.
  list.land(match[1]);
})();
