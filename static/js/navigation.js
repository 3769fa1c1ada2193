// An order opened from the list (a boosted click) ends visibly, whatever becomes of its request.
// htmx leaves a 4xx or 5xx answer unswapped and, when no answer comes, gives up without a word:
// with the database frozen the reader clicked and nothing happened. Here the server's own page
// is shown for any error it answers with one (what happened, the request id, what to do), and
// when no answer comes at all (the network, htmx's timeout, set past the server's own bound:
// orders/views/templating.py) the browser goes to the address itself, with its own progress and,
// at worst, its own error page. It does not know how the scroll window works.
import { requestedPath } from "./dom.js";

function isPage(text) {
  return /^\s*<!doctype html/i.test(text || "");
}


export function start() {
  document.addEventListener("htmx:beforeSwap", function (evt) {
    var detail = evt.detail;
    if (detail.boosted && detail.xhr.status >= 400 && isPage(detail.serverResponse)) {
      detail.shouldSwap = true;
      detail.isError = false;
    }
  });
  function goThere(evt) {
    var detail = evt.detail, url = detail.boosted && requestedPath(detail);
    if (url) window.location.assign(url);
  }
  document.addEventListener("htmx:sendError", goThere);
  document.addEventListener("htmx:timeout", goThere);
}
