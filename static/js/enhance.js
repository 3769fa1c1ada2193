// Small enhancements, each on its own: local times, the "go to" form's time zone. None of them
// knows how the scroll window works; the list works without them.
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

  // "Go to" a date and time: the list shows times in the reader's zone, so the server is told
  // the zone's offset at that date (without JavaScript, both are UTC).
  document.addEventListener("submit", function (evt) {
    var form = evt.target;
    if (!form.matches || !form.matches("form.jump")) return;
    var when = form.querySelector('input[type="datetime-local"]');
    var old = form.querySelector('input[name="tz"]');
    if (old) old.remove();
    if (!when || !when.value) return;
    var tz = document.createElement("input");
    tz.type = "hidden";
    tz.name = "tz";
    tz.value = String(new Date(when.value).getTimezoneOffset());
    form.appendChild(tz);
  });
  // Sort and status: static/controls.js (applied by Apply, or on a pointer's choice only).
}
