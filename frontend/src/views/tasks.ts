// Tasks: run a command, watch its output live, cancel it, read old logs.

import { FitAddon } from "@xterm/addon-fit";
import { Terminal } from "@xterm/xterm";
import "@xterm/xterm/css/xterm.css";
import { api, fullLog, type Task } from "../api";
import { fill, h, icon } from "../dom";
import { ago, bytes, clock, commandLine, taskDuration, taskOutcome } from "../format";
import { store } from "../store";
import { badge, busy, button, header, message, toast, type View } from "../ui";

const TIMEOUTS: [string, number][] = [
  ["No time limit", 0],
  ["1 minute", 60],
  ["10 minutes", 600],
  ["1 hour", 3600],
];

export function tasksView(): View {
  const cmd = h("input", {
    type: "text",
    class: "input mono",
    placeholder: "e.g.  ls -la   or   python3 analyse.py",
    "aria-label": "Command",
    "data-testid": "task-command",
    spellcheck: "false",
    autocomplete: "off",
  });
  const timeout = h("select", { class: "input select", "aria-label": "Time limit", "data-testid": "task-timeout" }, TIMEOUTS.map(([l, v]) => h("option", { value: String(v) }, l)));
  const asRoot = h("input", { type: "checkbox", "data-testid": "task-root" });
  const runBtn = button("Run", { variant: "primary", icon: "play", type: "submit", testid: "task-run" });
  const err = h("p", { class: "field-error", role: "alert", "data-testid": "task-error" });
  const list = h("ul", { class: "task-list", "data-testid": "task-list" });
  const count = h("span", { class: "muted" });
  const detailHead = h("div", { class: "detail-head" });
  const termHost = h("div", { class: "terminal", "data-testid": "task-output" });
  const empty = h(
    "div",
    { class: "empty-state" },
    icon("tasks", 36),
    h("h3", null, "No task selected"),
    h("p", null, "Run a command above. It runs inside the sandbox, in your shared folder, and its output appears here as it happens."),
  );
  const detail = h("div", { class: "task-detail", hidden: true }, detailHead, termHost);

  let selected = "";
  let follow: AbortController | null = null;
  let term: Terminal | null = null;
  let fit: FitAddon | null = null;
  // The bytes shown for the selected task: tests and "copy" read it.
  let shown = 0;

  function terminal(): Terminal {
    if (term) return term;
    term = new Terminal({
      convertEol: true,
      disableStdin: true,
      cursorBlink: false,
      cursorStyle: "bar",
      cursorInactiveStyle: "none",
      scrollback: 20000,
      fontFamily: '"JetBrains Mono", "DejaVu Sans Mono", Menlo, Consolas, monospace',
      fontSize: 13,
      lineHeight: 1.25,
      theme: { background: "#0f1720", foreground: "#d9e2ec", cursor: "#0f1720", selectionBackground: "#2f4b66", red: "#ff7b72", brightBlack: "#6b7a89" },
    });
    fit = new FitAddon();
    term.loadAddon(fit);
    term.open(termHost);
    new ResizeObserver(() => {
      try {
        fit?.fit();
      } catch {
        /* hidden */
      }
    }).observe(termHost);
    return term;
  }

  function select(id: string): void {
    if (selected === id && follow) return;
    selected = id;
    follow?.abort();
    const ctl = new AbortController();
    follow = ctl;
    detail.hidden = false;
    empty.hidden = true;
    const t = terminal();
    t.reset();
    shown = 0;
    termHost.dataset.task = id;
    termHost.dataset.done = "false";
    renderList();
    renderDetail();
    requestAnimationFrame(() => fit?.fit());
    // Follow from the start: the server sends what is stored, then what
    // arrives, and ends the stream when the task is over.
    void api
      .followLog(
        id,
        (c) => {
          if (ctl.signal.aborted) return;
          if (c.stream === "stderr") {
            t.write("\x1b[31m");
            t.write(c.data);
            t.write("\x1b[0m");
          } else t.write(c.data);
          shown += c.data.length;
        },
        ctl.signal,
      )
      .then(() => {
        if (ctl.signal.aborted) return;
        termHost.dataset.done = "true";
        const task = store.tasks.get(id);
        if (task && shown === 0) t.write("\x1b[90m(no output)\x1b[0m\r\n");
      })
      .catch((e) => {
        if (!ctl.signal.aborted) t.write(`\r\n\x1b[31m[could not read the output: ${message(e)}]\x1b[0m\r\n`);
      })
      .finally(() => {
        if (follow === ctl) follow = null;
      });
  }

  async function run(): Promise<void> {
    const line = cmd.value.trim();
    if (!line) {
      err.textContent = "Type a command to run, for example: ls -la";
      cmd.focus();
      return;
    }
    await busy(
      runBtn,
      async () => {
        const t = await api.runShell(line, { root: asRoot.checked, timeoutSec: Number(timeout.value) });
        store.putTask(t);
        cmd.value = "";
        select(t.id);
      },
      err,
    );
  }

  function sorted(): Task[] {
    return [...store.tasks.values()].sort((a, b) => b.created.localeCompare(a.created));
  }

  // Rows and buttons are kept and patched, never rebuilt: an element
  // replaced between mouse down and up loses the click.
  const rows = new Map<string, { li: HTMLLIElement; btn: HTMLButtonElement; key: string }>();
  const emptyRow = h("li", { class: "empty" }, "Nothing has run yet.");

  function renderList(): void {
    const ts = sorted();
    count.textContent = ts.length ? `${ts.length}` : "";
    if (ts.length === 0) {
      rows.clear();
      fill(list, emptyRow);
      return;
    }
    emptyRow.remove();
    const keep = new Set(ts.map((t) => t.id));
    for (const [id, r] of rows) if (!keep.has(id)) (r.li.remove(), rows.delete(id));
    ts.forEach((t, i) => {
      let r = rows.get(t.id);
      if (!r) {
        const btn = h("button", { type: "button", class: "task-item", "data-testid": "task-item", "data-task": t.id, onclick: () => select(t.id) });
        r = { li: h("li", null, btn), btn, key: "" };
        rows.set(t.id, r);
      }
      r.btn.classList.toggle("selected", t.id === selected);
      r.btn.dataset.state = t.state;
      const o = taskOutcome(t);
      const when = ago(t.created);
      const took = t.started ? taskDuration(t) : "";
      const key = [commandLine(t), o.label, when, took].join("\0");
      if (key !== r.key) {
        r.key = key;
        fill(
          r.btn,
          h("div", { class: "task-line" }, h("code", { class: "task-cmd" }, commandLine(t))),
          h("div", { class: "task-meta" }, badge(o.label, o.tone), h("span", { class: "muted" }, when), took ? h("span", { class: "muted" }, took) : null),
        );
      }
      if (list.children[i] !== r.li) list.insertBefore(r.li, list.children[i] ?? null);
    });
  }

  const detailCmd = h("code", { class: "detail-cmd" });
  const detailMeta = h("div", { class: "detail-meta" });
  const cancelBtn = button("Cancel", {
    variant: "danger",
    icon: "stop",
    testid: "task-cancel",
    onClick: () => {
      const id = selected;
      void busy(cancelBtn, async () => store.putTask(await api.cancel(id)));
    },
  });
  const saveBtn = button("Save log", {
    icon: "download",
    testid: "task-save",
    title: "Download the whole output as a text file",
    onClick: () => {
      const id = selected;
      void busy(saveBtn, async () => {
        const text = await fullLog(id);
        const a = h("a", { href: URL.createObjectURL(new Blob([text], { type: "text/plain" })), download: `airlock-task-${id}.log` });
        a.click();
        setTimeout(() => URL.revokeObjectURL(a.href), 10000);
      });
    },
  });
  detailHead.append(h("div", { class: "detail-title" }, detailCmd, detailMeta), h("div", { class: "row" }, cancelBtn, saveBtn));

  function renderDetail(): void {
    const t = store.tasks.get(selected);
    if (!t) {
      detail.hidden = true;
      empty.hidden = false;
      return;
    }
    const o = taskOutcome(t);
    cancelBtn.hidden = !(t.state === "running" || t.state === "queued");
    const line = commandLine(t);
    detailCmd.textContent = line;
    detailCmd.title = line;
    const facts: (string | null)[] = [
      t.started ? `Started ${clock(t.started)}` : "Waiting to start",
      t.started ? taskDuration(t) : null,
      `${bytes(t.output.stdout + t.output.stderr)} of output`,
      t.output.truncated ? `output cut at its limit, ${bytes(t.output.dropped ?? 0)} discarded` : null,
      t.command.root ? "as administrator (root)" : null,
      t.reason && t.reason !== "cancelled" ? t.reason : null,
    ];
    fill(detailMeta, badge(o.label, o.tone, "task-state"), facts.filter(Boolean).map((f) => h("span", { class: "muted" }, f!)));
  }

  const el = h(
    "div",
    { class: "page page-wide", "data-testid": "screen-tasks" },
    header("Tasks", "Commands running in the sandbox, in your shared folder."),
    h(
      "form",
      {
        class: "card run-bar",
        onsubmit: (e: SubmitEvent) => {
          e.preventDefault();
          void run();
        },
      },
      h("div", { class: "row" }, h("span", { class: "prompt mono" }, "$"), cmd, timeout, runBtn),
      h("div", { class: "row small" }, h("label", { class: "check" }, asRoot, " Run as administrator (root) inside the sandbox"), err),
    ),
    h(
      "div",
      { class: "tasks-split" },
      h("section", { class: "card task-col" }, h("h2", { class: "card-title" }, "History ", count), list),
      h("section", { class: "card detail-col" }, empty, detail),
    ),
  );
  cmd.addEventListener("input", () => (err.textContent = ""));

  // "3 s ago" and running durations move on.
  setInterval(() => {
    if (!el.hidden && store.tasks.size) {
      renderList();
      if (selected) renderDetail();
    }
  }, 5000);

  renderList();
  return {
    id: "tasks",
    title: "Tasks",
    icon: "tasks",
    el,
    update: (topic) => {
      if (topic !== "tasks") return;
      renderList();
      if (selected && !store.tasks.has(selected)) {
        toast("That task was removed from the history", "warn");
        follow?.abort();
        selected = "";
      }
      renderDetail();
    },
    shown: () => requestAnimationFrame(() => fit?.fit()),
  };
}
