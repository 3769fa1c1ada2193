// Local times: the server writes UTC, the reader sees their own zone. It does not know how the
// scroll window works; the list works without it.
import { onNewRows } from "./scroll-window.js";

var timeFormat = new Intl.DateTimeFormat(undefined, {
  year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit"
});

// On a card (below 52rem, static/app.css) a row's time shares its line with the status and the
// amount, up to 9,999,999,999.99: there it is year, month and day in figures, then the hour of a
// 24-hour clock, "2026-12-07 23:19" (the server's own form, in the reader's zone), unambiguous in
// every locale and about a third narrower than "Dec 7, 2026, 11:19 PM", which the largest amounts
// cut to "Dec 7, 202...". The order's page and the table keep the locale's form.
var cards = window.matchMedia("(max-width: 52rem)");

function twoDigits(n) { return (n < 10 ? "0" : "") + n; }

function shown(el, when) {
  // A row's time cell: rows loaded later are still detached here (the scroll window's hooks).
  if (!cards.matches || !el.closest("td.created")) return timeFormat.format(when);
  return when.getFullYear() + "-" + twoDigits(when.getMonth() + 1) + "-" + twoDigits(when.getDate()) +
    " " + twoDigits(when.getHours()) + ":" + twoDigits(when.getMinutes());
}

// The server writes UTC; the reader sees their own zone (the UTC text stays as the title).
export function localizeTimes(root) {
  root.querySelectorAll("time[datetime]").forEach(function (el) {
    if (el.dataset.localized) return;
    var when = new Date(el.getAttribute("datetime"));
    if (isNaN(when)) return;
    el.title = el.textContent;
    el.textContent = shown(el, when);
    el.dataset.localized = "1";
  });
}

export function start() {
  // New rows get their local times inside the scroll window's write phase (before it reads
  // layout), not in a later task that would lay the table out again.
  onNewRows(function (root) { localizeTimes(root.querySelectorAll ? root : document); });
  localizeTimes(document);
  // Across 52rem (a turned phone, a resized window) the rows' times take the layout's form. A
  // card's height does not change with it (the time is one line either way).
  cards.addEventListener("change", function () {
    document.querySelectorAll("#rows time[data-localized]").forEach(function (el) {
      el.textContent = shown(el, new Date(el.getAttribute("datetime")));
    });
  });
}
