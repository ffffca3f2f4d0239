// The transcript of both sides as a chat: one list entry per conversation item.

export class Chat {
  constructor(list) {
    this.list = list;
    this.entries = new Map(); // item id -> {li, text, meta}
  }

  entry(itemId, role) {
    let entry = this.entries.get(itemId);
    if (entry) return entry;
    const li = document.createElement("li");
    li.className = `message ${role}`;
    li.dataset.role = role;
    li.dataset.itemId = itemId;
    li.dataset.final = "false";
    const who = document.createElement("span");
    who.className = "who";
    who.textContent = role === "user" ? "You" : "Assistant";
    const text = document.createElement("p");
    text.className = "text";
    const meta = document.createElement("span");
    meta.className = "meta";
    li.append(who, text, meta);
    this.list.append(li);
    entry = { li, text, meta, role };
    this.entries.set(itemId, entry);
    this.scroll();
    return entry;
  }

  has(itemId) {
    return this.entries.has(itemId);
  }

  // A delta after the entry is final (a late partial transcript) would duplicate words: dropped.
  append(itemId, role, delta) {
    const entry = this.entry(itemId, role);
    if (entry.li.dataset.final === "true") return;
    entry.text.textContent += delta;
    this.scroll();
  }

  set(itemId, role, text, final = true) {
    const entry = this.entry(itemId, role);
    entry.text.textContent = text;
    if (final) entry.li.dataset.final = "true";
    this.scroll();
  }

  finish(itemId) {
    const entry = this.entries.get(itemId);
    if (entry) entry.li.dataset.final = "true";
  }

  // Adds a remark under an entry (latency, "interrupted"); remarks accumulate.
  note(itemId, text, data = {}) {
    const entry = this.entries.get(itemId);
    if (!entry) return;
    entry.meta.textContent = entry.meta.textContent ? `${entry.meta.textContent} · ${text}` : text;
    Object.assign(entry.li.dataset, data);
  }

  scroll() {
    this.list.scrollTop = this.list.scrollHeight;
  }
}
