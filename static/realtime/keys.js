// The admin's API keys: the Copy button beside a new key (shown once), and a question before Revoke.
// No inline script: CSP.
(function () {
  "use strict";
  document.addEventListener("click", (event) => {
    const copy = event.target.closest("button.copy-key");
    if (copy) {
      const key = document.getElementById(copy.dataset.copy).textContent;
      const done = () => { copy.textContent = "Copied"; };
      if (navigator.clipboard && window.isSecureContext) {
        navigator.clipboard.writeText(key).then(done, () => select(copy));
      } else {
        select(copy);
      }
      return;
    }
    const revoke = event.target.closest("#revoke-key");
    if (revoke && !window.confirm("Revoke the key " + revoke.dataset.keyName + "? It stops working at once and its live sessions end.")) {
      event.preventDefault();
    }
  });

  // Where the clipboard is out of reach (plain http on another host): the key selected, for Ctrl+C.
  function select(copy) {
    const range = document.createRange();
    range.selectNodeContents(document.getElementById(copy.dataset.copy));
    window.getSelection().removeAllRanges();
    window.getSelection().addRange(range);
    copy.textContent = "Selected: press Ctrl+C";
  }
})();
