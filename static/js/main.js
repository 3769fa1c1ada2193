// The front end's entry point (a module, deferred: it runs after htmx and before htmx reads the
// page). Everything here is an enhancement: without JavaScript the list pages by plain links and
// forms, and the same URLs open the same places.
//   scroll-window.js  loads, drops, the reader's place, the address; its API is window.ordersList
//   enhance.js        local times, the go-to form's time zone, sort and status on change
//   dom.js            the selectors and templates both share
import * as scrollWindow from "./scroll-window.js";
import * as enhance from "./enhance.js";

document.documentElement.classList.add("js");
window.ordersList = scrollWindow.api;
enhance.start();
scrollWindow.start();
