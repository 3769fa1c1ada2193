// An order opened from the list (a boosted click) ends visibly, whatever becomes of its request.
// htmx 4 swaps an answer with an error status like any other, so the server's own page shows for
// any error it answers with one (what happened, the request id, what to do). When no answer
// comes at all (the network, htmx's timeout, set past the server's own bound:
// orders/views/templating.py), htmx gives up without a word: with the database frozen the reader
// clicked and nothing happened. Here the browser then goes to the address itself, with its own
// progress and, at worst, its own error page. It does not know how the scroll window works.

export function start() {
  document.addEventListener("htmx:error", function (evt) {
    var request = evt.detail.ctx && evt.detail.ctx.request;  // absent: an error before any request
    var boosted = request && request.headers && request.headers["HX-Boosted"] === "true";
    if (boosted && request.action) window.location.assign(request.action);
  });
}
