// The slot board of the admin: every node's units, refreshed in place (no inline script: CSP). A refresh changes
// only the cells whose value changed, so keyboard focus (an End session button) and a screen reader's place stay.
(function () {
  "use strict";
  const root = document.getElementById("board");
  const boardUrl = root.dataset.boardUrl;
  const endUrl = root.dataset.endUrl;
  const sessionsUrl = root.dataset.sessionsUrl;
  const canEnd = root.dataset.canEnd === "true";
  const canSupervise = root.dataset.canSupervise === "true";
  const csrf = document.querySelector("input[name=csrfmiddlewaretoken]").value;
  // [header (a phone's card shows it before the value), class of its cells]; a last column holds Supervise (a link to
  // the session page's controls) and End session.
  const COLUMNS = [
    ["Unit", "unit"], ["State", "state"], ["Activity", "activity"], ["Session", "session"], ["Transport", "transport"],
    ["Client", "client"], ["For", "for"], ["Sessions served", "served"], ["Rebuilds", "rebuilds"],
  ];

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

  // What each cell of a unit's row shows: [a key that changes when the cell must be drawn again, its content].
  function cells(slot) {
    const busy = slot.state !== "idle" && slot.state !== "gone";
    const session = busy && slot.session_id ? slot.session_id : "";
    const rebuilt = slot.rebuilds ? String(slot.rebuilds) + (slot.last_rebuild ? " (last: " + slot.last_rebuild + ")" : "") : "0";
    const endable = canEnd && slot.state === "busy" && session;
    const supervisable = canSupervise && slot.state === "busy" && session;
    const page = sessionsUrl + encodeURIComponent(session) + "/change/";
    return {
      unit: [String(slot.index)],
      state: [slot.state, () => el("span", {class: "state-" + slot.state}, slot.state)],
      activity: [busy ? slot.activity || "" : ""],
      session: [session, () => session ? el("a", {href: page}, session) : ""],
      transport: [busy ? slot.transport || "" : ""],
      client: [busy ? slot.client || "" : ""],
      for: [slot.for_s === null || slot.for_s === undefined ? "" : slot.for_s.toFixed(1) + " s"],
      served: [String(slot.sessions_served)],
      rebuilds: [rebuilt],
      end: [endable || supervisable ? session : "", () => endable || supervisable ? el("span", {},
        supervisable ? el("a", {href: page + "#supervise", class: "supervise"}, "Supervise") : "",
        endable ? el("button", {type: "button", class: "button end-session", onclick: e => endSession(session, e.target)}, "End session") : "") : ""],
    };
  }

  function update(cell, [key, draw]) {
    if (cell.dataset.key === key) return;
    cell.dataset.key = key;
    const content = draw ? draw() : key;
    cell.replaceChildren(...(content === "" ? [] : [content]));
  }

  function row(node, slot) {
    const tr = el("tr", {"data-node": node.name, "data-unit": slot.index});
    for (const [label, name] of COLUMNS) tr.append(el("td", {class: name, "data-label": label}));
    tr.append(el("td", {class: "end"}));
    return tr;
  }

  function nodeBox(node) {
    return el("div", {class: "node", "data-node": node.name}, el("h2", {}), el("p", {class: "meta"}),
      el("table", {},
        el("thead", {}, el("tr", {}, ...COLUMNS.map(([label]) => el("th", {scope: "col"}, label)),
          el("th", {scope: "col"}, el("span", {class: "visually-hidden"}, "Actions")))),
        el("tbody", {})));
  }

  function setText(node, text) {
    if (node.textContent !== text) node.textContent = text;
  }

  function render(nodes) {
    const seen = new Set(nodes.map(node => node.name));
    for (const box of root.querySelectorAll(":scope > .node")) if (!seen.has(box.dataset.node)) box.remove();
    let empty = root.querySelector(":scope > p.empty");
    if (!nodes.length && !empty) root.append(el("p", {class: "empty"}, "No node has published its slots yet."));
    if (nodes.length && empty) empty.remove();
    for (const node of nodes) {
      let box = [...root.querySelectorAll(":scope > .node")].find(b => b.dataset.node === node.name);
      if (!box) root.append(box = nodeBox(node));
      box.className = "node node-" + node.status;
      setText(box.querySelector("h2"), node.name + " — " + node.status);
      setText(box.querySelector("p.meta"), `pid ${node.pid ?? "?"} on ${node.host || "?"} · ${node.profile} profile · ` +
        `${node.free_units} free of ${node.slots.length} · ${node.rejections} rejected · heartbeat ${node.heartbeat_age_s} s ago`);
      const body = box.querySelector("tbody");
      const units = new Set(node.slots.map(slot => String(slot.index)));
      for (const tr of body.querySelectorAll("tr")) if (!units.has(tr.dataset.unit)) tr.remove();
      for (const slot of node.slots) {
        let tr = body.querySelector(`tr[data-unit="${slot.index}"]`);
        if (!tr) body.append(tr = row(node, slot));
        const values = cells(slot);
        for (const td of tr.children) update(td, values[td.className]);
      }
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
