// The prompt shown when a task tries to reach a site no rule covers. The
// gate holds the connection until someone answers or 60 s pass.

import { api, type Ask, type Verdict } from "./api";
import { h, icon } from "./dom";
import { target } from "./format";
import { store } from "./store";
import { message, toast } from "./ui";

const ASK_SECONDS = 60;

// moreText lists the other destinations one question covers: a task that
// asks for many hosts at once gets one prompt, answered once for all.
function moreText(a: Ask): string {
  const n = a.more?.length ?? 0;
  if (n === 0) return "";
  const shown = a.more!.slice(0, 20).join(", ");
  return `and ${n} more (one answer for all): ${shown}${n > 20 ? ", …" : ""}`;
}

export function askPanel(): { el: HTMLElement; update(): void } {
  const el = h("div", { class: "asks", "aria-live": "assertive", "data-testid": "asks" });
  const answering = new Set<string>();

  async function answer(a: Ask, v: Verdict, row: HTMLElement): Promise<void> {
    answering.add(a.id);
    row.classList.add("answering");
    row.querySelectorAll("button").forEach((b) => (b.disabled = true));
    try {
      await api.answer(a.id, v);
      if (v === "allow-always") toast(`${a.host}${a.more?.length ? ` and ${a.more.length} more are` : " is"} now on your allow list`, "ok");
    } catch (e) {
      toast(message(e), "warn");
    } finally {
      answering.delete(a.id);
      store.asks.delete(a.id);
      store.emit("asks");
    }
  }

  function left(a: Ask): number {
    return Math.max(0, Math.ceil(ASK_SECONDS - (Date.now() - new Date(a.time).getTime()) / 1000));
  }

  // One element per question, kept while it is pending, so a click is
  // never lost to a re-render when another question arrives.
  const rows = new Map<string, HTMLElement>();

  function row(a: Ask): HTMLElement {
    const task = a.task ? store.tasks.get(a.task) : undefined;
    const what = task ? (task.command.shell ?? task.command.argv?.join(" ") ?? "") : "";
    const r: HTMLElement = h(
      "div",
      { class: "ask", role: "alertdialog", "aria-label": `Allow ${a.host}?`, "data-testid": "ask", "data-ask": a.id, "data-host": a.host },
      h("div", { class: "ask-icon" }, icon("network", 22)),
      h(
        "div",
        { class: "ask-text" },
        h("div", { class: "ask-title" }, "A task wants to connect to ", h("strong", { class: "mono" }, target(a.host, a.port, a.protocol))),
        h("div", { class: "muted small mono ask-more", "data-testid": "ask-more" }, moreText(a)),
        h("div", { class: "muted small" }, what ? h("span", null, "Task: ", h("code", null, what.length > 80 ? what.slice(0, 80) + "…" : what), " · ") : null, h("span", { class: "ask-left" }, `blocked in ${left(a)} s if you do not answer`)),
      ),
      h(
        "div",
        { class: "ask-actions" },
        h("button", { type: "button", class: "btn btn-secondary", "data-testid": "ask-deny", onclick: () => void answer(a, "deny", r) }, "Deny"),
        h("button", { type: "button", class: "btn btn-secondary", "data-testid": "ask-once", onclick: () => void answer(a, "allow-once", r) }, "Allow once"),
        h("button", { type: "button", class: "btn btn-primary", "data-testid": "ask-always", onclick: () => void answer(a, "allow-always", r) }, "Always allow"),
      ),
    );
    return r;
  }

  function update(): void {
    const asks = [...store.asks.values()].sort((x, y) => x.time.localeCompare(y.time));
    el.hidden = asks.length === 0;
    const keep = new Set(asks.map((a) => a.id));
    for (const [id, r] of rows) if (!keep.has(id)) (r.remove(), rows.delete(id));
    asks.forEach((a, i) => {
      let r = rows.get(a.id);
      if (!r) rows.set(a.id, (r = row(a)));
      const more = r.querySelector(".ask-more");
      if (more) more.textContent = moreText(a);
      if (el.children[i] !== r) el.insertBefore(r, el.children[i] ?? null);
    });
  }

  let lastSync = 0;
  setInterval(() => {
    let expired = false;
    for (const a of store.asks.values()) {
      const span = el.querySelector(`[data-ask="${a.id}"] .ask-left`);
      if (span) span.textContent = `blocked in ${left(a)} s if you do not answer`;
      if (left(a) === 0 && !answering.has(a.id)) expired = true;
    }
    // The gate has given up on it: re-read the questions, in case the
    // ask-answered event was missed.
    if (expired && Date.now() - lastSync > 5000) {
      lastSync = Date.now();
      void api
        .asks()
        .then((list) => {
          store.asks = new Map(list.map((a) => [a.id, a]));
          store.emit("asks");
        })
        .catch(() => {});
    }
  }, 1000);

  update();
  return { el, update };
}
