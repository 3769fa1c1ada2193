// Local times: the server writes UTC, the reader sees their own zone. It does not know how the
// scroll window works; the list works without it.
import { onNewRows } from "./scroll-window.js";

var timeFormat = new Intl.DateTimeFormat(undefined, {
  year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit"
});

// The server writes UTC; the reader sees their own zone (the UTC text stays as the title).
export function localizeTimes(root) {
  root.querySelectorAll("time[datetime]").forEach(function (el) {
    if (el.dataset.localized) return;
    var when = new Date(el.getAttribute("datetime"));
    if (isNaN(when)) return;
    el.title = el.textContent;
    el.textContent = timeFormat.format(when);
    el.dataset.localized = "1";
  });
}

export function start() {
  // New rows get their local times inside the scroll window's write phase (before it reads
  // layout), not in a later task that would lay the table out again.
  onNewRows(function (root) { localizeTimes(root.querySelectorAll ? root : document); });
  localizeTimes(document);
}
