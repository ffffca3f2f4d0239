// A live session's admin page: asks before ending it, and every few seconds reads the page again and puts what
// changed in place (facts, latency, chart, supervision, new or changed turns), without reloading: focus, scroll and a playing
// recording stay. Once the page says the session ended (no #live), the live bar goes and the reading stops.
// No inline script: CSP.
(function () {
  "use strict";
  const live = document.getElementById("live");
  if (!live) return;
  const PARTS = ["facts", "summary", "chart", "supervision"];
  const every = Number(live.dataset.refreshMs) || 5000;
  const form = document.getElementById("end-session-form");
  let ending = false;
  if (form) {
    form.addEventListener("submit", (event) => {
      if (!window.confirm("End session " + form.dataset.sessionId + "? The user is disconnected at once and told an administrator ended it.")) {
        event.preventDefault();
        return;
      }
      ending = true;
    });
  }

  function swap(mine, theirs) {
    if (mine && theirs && mine.outerHTML !== theirs.outerHTML) mine.replaceWith(document.importNode(theirs, true));
  }

  // The transcript row by row: a new turn is added, a turn whose words or timings changed is redrawn.
  function turns(doc) {
    const body = document.querySelector("#transcript tbody");
    const fresh = doc.querySelector("#transcript tbody");
    if (!body || !fresh) return;
    const rows = [...fresh.querySelectorAll("tr[data-item-id]")];
    if (rows.length) for (const tr of body.querySelectorAll("tr:not([data-item-id])")) tr.remove();
    for (const tr of rows) {
      const mine = [...body.querySelectorAll("tr[data-item-id]")].find((row) => row.dataset.itemId === tr.dataset.itemId);
      if (mine) swap(mine, tr);
      else body.append(document.importNode(tr, true));
    }
  }

  async function refresh() {
    if (ending) return;
    try {
      const response = await fetch(window.location.href, { credentials: "same-origin", cache: "no-store" });
      if (response.ok && !ending) {
        const doc = new DOMParser().parseFromString(await response.text(), "text/html");
        for (const id of PARTS) swap(document.getElementById(id), doc.getElementById(id));
        turns(doc);
        if (!doc.getElementById("live")) {
          document.getElementById("live").remove();
          return;
        }
      }
    } catch (error) {
      // the next try may reach the server again
    }
    setTimeout(refresh, every);
  }

  setTimeout(refresh, every);
})();
