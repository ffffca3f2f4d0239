// The slot board of the admin: renders every node's units and refreshes them (no inline script: CSP).
(function () {
  "use strict";
  const root = document.getElementById("board");
  const boardUrl = root.dataset.boardUrl;
  const endUrl = root.dataset.endUrl;
  const sessionsUrl = root.dataset.sessionsUrl;
  const canEnd = root.dataset.canEnd === "true";
  const csrf = document.querySelector("input[name=csrfmiddlewaretoken]").value;

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (key === "class") node.className = value; else if (key === "onclick") node.onclick = value; else node.setAttribute(key, value);
    }
    for (const child of children) node.append(child instanceof Node ? child : document.createTextNode(child ?? ""));
    return node;
  }

  function endSession(sessionId, button) {
    if (!window.confirm("End session " + sessionId + "? The user is disconnected at once and told an administrator ended it.")) return;
    button.disabled = true;
    fetch(endUrl.replace("SESSION_ID", encodeURIComponent(sessionId)), {
      method: "POST", headers: {"X-CSRFToken": csrf}, credentials: "same-origin",
    }).then(r => r.json()).then(body => { button.textContent = body.status || body.error; refresh(); });
  }

  function render(nodes) {
    root.replaceChildren();
    if (!nodes.length) root.append(el("p", {}, "No node has published its slots yet."));
    for (const node of nodes) {
      // data-label: a phone shows each unit as a card, each value after its column's name
      const rows = node.slots.map(slot => el("tr", {"data-node": node.name, "data-unit": slot.index},
        el("td", {class: "unit", "data-label": "Unit"}, String(slot.index)),
        el("td", {class: "state", "data-label": "State"}, el("span", {class: "state-" + slot.state}, slot.state)),
        el("td", {class: "session", "data-label": "Session"}, slot.session_id && slot.state !== "idle"
          ? el("a", {href: sessionsUrl + encodeURIComponent(slot.session_id) + "/change/"}, slot.session_id) : ""),
        el("td", {"data-label": "For"}, slot.for_s === null || slot.for_s === undefined ? "" : slot.for_s.toFixed(1) + " s"),
        el("td", {"data-label": "Sessions served"}, String(slot.sessions_served)),
        el("td", {"data-label": "Rebuilds"}, String(slot.rebuilds)),
        el("td", {class: "end"}, canEnd && slot.state === "busy" && slot.session_id
          ? el("button", {type: "button", class: "button end-session", onclick: e => endSession(slot.session_id, e.target)}, "End session") : "")));
      root.append(el("div", {class: "node node-" + node.status, "data-node": node.name},
        el("h2", {}, node.name + " — " + node.status),
        el("p", {class: "meta"}, `pid ${node.pid ?? "?"} on ${node.host || "?"} · ${node.profile} profile · ` +
          `${node.free_units} free of ${node.slots.length} · ${node.rejections} rejected · heartbeat ${node.heartbeat_age_s} s ago`),
        el("table", {},
          el("thead", {}, el("tr", {}, ...["Unit", "State", "Session", "For", "Sessions served", "Rebuilds", ""].map(h => el("th", {}, h)))),
          el("tbody", {}, ...rows))));
    }
    document.getElementById("board-updated").textContent = new Date().toLocaleTimeString();
  }

  function refresh() {
    fetch(boardUrl, {credentials: "same-origin"}).then(r => {
      if (!r.ok) throw new Error("HTTP " + r.status);
      return r.json();
    }).then(body => { document.getElementById("board-error").hidden = true; render(body.nodes); })
      .catch(err => { const note = document.getElementById("board-error"); note.hidden = false; note.textContent = "Refresh failed: " + err.message; });
  }

  render(JSON.parse(document.getElementById("board-initial").textContent));
  setInterval(refresh, Number(root.dataset.refreshMs));
})();
