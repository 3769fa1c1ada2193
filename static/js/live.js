// New orders, pushed (docs/scroll.md, "New orders, pushed"): while the list shows its top (the
// "N new orders" pill's #new-orders is there), an EventSource on its data-stream URL hears
// "new orders, the latest is N" from the server within a second or two of their commit, and
// makes the pill ask /orders/new at once (its hx-trigger "orders:pushed"): the count stays in one
// place, the server's. The pill's own poll (every NEW_ORDERS_POLL_SECONDS) goes on all the same:
// the fallback when the server refuses a stream (503: full, or a server that holds none), a proxy
// cuts it, or there is no EventSource. A refused stream is tried again later, less and less often.
var source = null;
var retryTimer = 0;
var backoff = 0;  // seconds before the next try after a refusal (30, 60, ... 300)
var pending = false;  // an event arrived while the pill's request was under way

function pill() { return document.getElementById("new-orders"); }

function ask() {
  var el = pill();
  if (!el) return;
  // One request at a time: an event during one asks once more when it ends.
  if (el.classList.contains("htmx-request")) { pending = true; return; }
  htmx.trigger(el, "orders:pushed");
}

function connect() {
  var el = pill(), url = el && el.dataset.stream;
  if (!url || !window.EventSource) return disconnect();
  if (source || retryTimer) return;
  source = new EventSource(url);
  source.addEventListener("open", function () { backoff = 0; });
  source.addEventListener("orders", ask);
  source.addEventListener("error", function () {
    // CONNECTING: EventSource opens it again by itself (a cut, or the stream's lifetime). CLOSED:
    // refused (503) or not a stream at all; the poll carries on, and the stream is tried later.
    if (!source || source.readyState !== EventSource.CLOSED) return;
    source = null;
    backoff = Math.min(backoff ? backoff * 2 : 30, 300);
    retryTimer = setTimeout(function () { retryTimer = 0; sync(); }, backoff * 1000);
  });
}

function disconnect() {
  if (source) source.close();
  source = null;
  clearTimeout(retryTimer);
  retryTimer = 0;
}

// A stream while the pill is there (the list at its top), none otherwise: the pill comes and
// goes with the list opened in place (Top, Go to, Back), each time a new element.
function sync() { if (pill()) connect(); else disconnect(); }

export function start() {
  document.addEventListener("orders:opened", sync);
  document.addEventListener("orders:restored", sync);
  document.addEventListener("htmx:finally:request", function (evt) {
    if (evt.detail.ctx.sourceElement === pill() && pending) { pending = false; ask(); }
  });
  // Closed when the page goes (and into the back-forward cache), opened when it comes back.
  window.addEventListener("pagehide", disconnect);
  window.addEventListener("pageshow", sync);
  sync();
}
