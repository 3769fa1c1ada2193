// The front end's entry point (a module, deferred: it runs after htmx and before htmx reads the
// page, on DOMContentLoaded: base.html). It marks the page as scripted (html.js), starts these and exposes the scroll window's
// API as window.ordersList; without JavaScript the list pages by plain links and forms, and the
// same URLs open the same places.
//   scroll-window.js  loads, drops, the reader's place, the address
//   enhance.js        local times
//   reader.js         the rows as a feed: keys row to row, a tap anywhere on a card, focus kept
//   live.js           new orders pushed: a live stream makes the pill ask at once
//   navigation.js     an order opened from the list ends visibly, an error page at worst
// The list page adds controls.js (the find bar); dom.js holds what all of them share.
import * as scrollWindow from "./scroll-window.js";
import * as enhance from "./enhance.js";
import * as reader from "./reader.js";
import * as live from "./live.js";
import * as navigation from "./navigation.js";

document.documentElement.classList.add("js");
window.ordersList = scrollWindow.api;
enhance.start();
scrollWindow.start();
reader.start();
live.start();
navigation.start();
