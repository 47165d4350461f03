// mesh serve: the live part of the pages, and nothing else.
//
// A page with a [data-stream] element opens one EventSource on that address. A "checkpoint"
// event carries the HTML of one new card (rendered and escaped by the server) and the run it
// belongs to; a "changed" event tells the parts of the page that htmx redraws whole (they listen
// for "mesh:changed" on the body). The id of the last event received is kept: the browser sends
// it back by itself when it reconnects (Last-Event-ID), and when the stream has to be opened
// anew it goes in the address (?last_event_id=), so a page resumes where it was.
(function () {
  "use strict";

  function findRun(runs, runId) {
    for (const section of runs.querySelectorAll("section.run")) {
      if (section.getAttribute("data-run") === runId) return section;
    }
    return null;
  }

  function place(runs, data) {
    let section = findRun(runs, data.run_id);
    if (!section) {
      const template = document.getElementById("run-template");
      section = template.content.firstElementChild.cloneNode(true);
      section.setAttribute("data-run", data.run_id);
      section.querySelector(".run-id").textContent = data.run_id;
      runs.prepend(section);  // the newest run first
      const none = document.getElementById("no-runs");
      if (none) none.remove();
    }
    section.querySelector(".steps").insertAdjacentHTML("beforeend", data.html);
  }

  function changed() {
    document.body.dispatchEvent(new CustomEvent("mesh:changed"));
  }

  function live(root) {
    const base = root.getAttribute("data-stream");
    const indicator = document.getElementById("live");
    let last = root.getAttribute("data-last-event") || "";
    let wait = 1000;

    function show(text) {
      if (!indicator) return;
      indicator.hidden = false;
      indicator.textContent = text;
      indicator.className = "live " + (text === "live" ? "on" : "off");
    }

    let source = null;

    function open() {
      const sep = base.indexOf("?") >= 0 ? "&" : "?";
      source = new EventSource(last ? base + sep + "last_event_id=" + encodeURIComponent(last) : base);
      source.addEventListener("open", function () { wait = 1000; show("live"); });
      source.addEventListener("checkpoint", function (event) {
        last = event.lastEventId || last;
        place(root, JSON.parse(event.data));
      });
      source.addEventListener("changed", function (event) {
        if (event.lastEventId) last = event.lastEventId;
        changed();
      });
      source.addEventListener("error", function () {
        show("reconnecting");
        if (source.readyState === EventSource.CLOSED) {  // the browser gave up: open a new one
          setTimeout(open, wait);
          wait = Math.min(wait * 2, 10000);
        }
      });
    }
    open();
    // A page left for another stays in the browser's back/forward cache with its stream open:
    // six such pages hold every connection a browser gives one host, and the next page waits
    // (a minute in Chromium). The stream is closed when the page is left, opened again if it is
    // shown from that cache (from the last event it got).
    window.addEventListener("pagehide", function () { source.close(); });
    window.addEventListener("pageshow", function (event) { if (event.persisted) open(); });
  }

  document.addEventListener("DOMContentLoaded", function () {
    for (const root of document.querySelectorAll("[data-stream]")) live(root);
  });
})();
