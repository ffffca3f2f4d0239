// The transcript of both sides as a chat: one list entry per conversation item.

export class Chat {
  constructor(list, onChange = () => {}) {
    this.list = list;
    this.onChange = onChange; // called when an entry is added or the chat is cleared
    this.entries = new Map(); // item id -> {li, text, meta, role, session}
    this.session = 0; // entries added since the last divider belong to this session
  }

  // A line across the chat where a new session starts: what is above it belongs to a session that is gone.
  divider(text) {
    this.session += 1;
    const li = document.createElement("li");
    li.className = "divider";
    li.dataset.role = "divider";
    li.textContent = text;
    this.list.append(li);
    this.scroll();
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
    entry = { li, text, meta, role, session: this.session };
    this.entries.set(itemId, entry);
    this.onChange();
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

  // Everything said so far as plain text, one "Who: words" paragraph per entry, remarks in brackets, and
  // "--- New session ... ---" where a session starts.
  text() {
    const lines = [];
    for (const li of this.list.children) {
      if (li.dataset.role === "divider") {
        lines.push(`--- ${li.textContent} ---`);
        continue;
      }
      const entry = this.entries.get(li.dataset.itemId);
      const who = entry.role === "user" ? "You" : "Assistant";
      const remark = entry.meta.textContent ? ` [${entry.meta.textContent}]` : "";
      lines.push(`${who}: ${entry.text.textContent}${remark}`);
    }
    return lines.join("\n\n") + (lines.length ? "\n" : "");
  }

  // Saves text() as conversation-YYYYMMDD-HHMMSS.txt.
  download() {
    const stamp = new Date().toISOString().slice(0, 19).replace(/[-:]/g, "").replace("T", "-");
    const blob = new Blob([this.text()], { type: "text/plain;charset=utf-8" });
    const anchor = document.createElement("a");
    anchor.href = URL.createObjectURL(blob);
    anchor.download = `conversation-${stamp}.txt`;
    document.body.append(anchor);
    anchor.click();
    anchor.remove();
    setTimeout(() => URL.revokeObjectURL(anchor.href), 1000);
  }

  // The items of the current session (the server knows no others).
  itemIds() {
    return [...this.entries.entries()].filter(([, entry]) => entry.session === this.session).map(([itemId]) => itemId);
  }

  clear() {
    this.entries.clear();
    this.list.replaceChildren();
    this.onChange();
  }

  get empty() {
    return this.entries.size === 0;
  }

  scroll() {
    this.list.scrollTop = this.list.scrollHeight;
  }
}
