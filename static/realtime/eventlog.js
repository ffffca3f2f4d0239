// A collapsible log of the Realtime events both ways, as in OpenAI's playground: one line per
// event (a run of audio appends or deltas folds into one line with a count), the JSON on click.

const LIMIT = 300;
const FOLDED = new Set(["input_audio_buffer.append", "response.output_audio.delta"]);

function shortened(event) {
  const copy = { ...event };
  for (const key of ["audio", "delta"]) {
    if (typeof copy[key] === "string" && copy[key].length > 80) copy[key] = `${copy[key].slice(0, 40)}… (${copy[key].length} characters)`;
  }
  return JSON.stringify(copy, null, 2);
}

export class EventLog {
  constructor(list, counter) {
    this.list = list;
    this.counter = counter;
    this.total = 0;
    this.last = null; // {type, direction, li, count}
  }

  add(direction, event) {
    this.total += 1;
    this.counter.textContent = `(${this.total})`;
    const type = event.type || "unknown";
    if (this.last && this.last.type === type && this.last.direction === direction && FOLDED.has(type)) {
      this.last.count += 1;
      this.last.badge.textContent = ` ×${this.last.count}`;
      return;
    }
    const li = document.createElement("li");
    li.className = `event ${direction}`;
    li.dataset.type = type;
    const details = document.createElement("details");
    const summary = document.createElement("summary");
    const time = new Date().toLocaleTimeString([], { hour12: false });
    const name = document.createElement("span");
    name.className = "type";
    // Long names wrap only after a "." or "_", never inside a word.
    for (const [index, part] of type.split(/(?<=[._])/).entries()) {
      if (index) name.append(document.createElement("wbr"));
      name.append(part);
    }
    summary.append(`${direction === "in" ? "↓" : "↑"} ${time} `, name);
    const badge = document.createElement("span");
    badge.className = "count";
    summary.append(badge);
    if (type === "error") li.classList.add("error");
    const pre = document.createElement("pre");
    details.addEventListener("toggle", () => {
      if (details.open && !pre.textContent) pre.textContent = shortened(event);
    });
    details.append(summary, pre);
    li.append(details);
    this.list.prepend(li);
    this.last = { type, direction, li, count: 1, badge };
    while (this.list.children.length > LIMIT) this.list.lastElementChild.remove();
  }

  clear() {
    this.list.replaceChildren();
    this.total = 0;
    this.last = null;
    this.counter.textContent = "(0)";
  }
}
