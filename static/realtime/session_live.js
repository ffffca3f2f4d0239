// A live session's admin page: asks before ending it, and loads the page again every few seconds until
// the session ends (the page that says so has no #live, so the refreshing stops there). No inline script: CSP.
(function () {
  "use strict";
  const live = document.getElementById("live");
  if (!live) return;
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
  setTimeout(() => {
    if (!ending) window.location.reload();
  }, Number(live.dataset.refreshMs) || 5000);
})();
