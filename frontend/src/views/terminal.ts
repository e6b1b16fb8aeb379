// Terminal: an interactive shell in the sandbox. The shell is a task on a
// PTY in the guest; this page attaches to it over a WebSocket, so a reload
// (or another window) reattaches and the host sends the recent screen
// back. It ends when the user closes it, or the shell exits.

import { FitAddon } from "@xterm/addon-fit";
import { Terminal } from "@xterm/xterm";
import "@xterm/xterm/css/xterm.css";
import { ApiError, api, native, type TerminalControl } from "../api";
import { h, icon } from "../dom";
import { store } from "../store";
import { badge, busy, button, header, message, type View } from "../ui";

/** Where the page remembers its terminal, so a reload finds it again. */
const KEY = "airlock.terminal";
/** Input is sent in pieces below the server's 64 KiB message bound. */
const INPUT_CHUNK = 16 << 10;
/** Close codes: 1000 the shell ended; 1013 this connection fell behind. */
const ENDED = 1000;

interface Link {
  send(b: Uint8Array): void;
  resize(rows: number, cols: number): void;
  close(): void;
}

/**
 * polled: a desktop window's webview serves the API from inside the app,
 * where no WebSocket reaches; there the terminal is followed by requests.
 */
const polled = native() !== undefined || typeof WebSocket === "undefined";

export function terminalView(): View {
  const host = h("div", { class: "terminal terminal-live", "data-testid": "terminal", hidden: true });
  const err = h("p", { class: "field-error", role: "alert", "data-testid": "terminal-error" });
  const state = h("span", { "data-testid": "terminal-state" });
  const openBtn = button("Open terminal", { variant: "primary", icon: "terminal", testid: "terminal-open", onClick: () => void open() });
  const rootBox = h("input", { type: "checkbox", "data-testid": "terminal-root" });
  const closeBtn = button("Close", {
    variant: "danger",
    icon: "stop",
    testid: "terminal-close",
    title: "End the shell and everything it started",
    onClick: () => void close(),
  });
  const empty = h(
    "div",
    { class: "empty-state" },
    icon("terminal", 36),
    h("h3", null, "No terminal open"),
    h("p", null, "Open a shell inside the sandbox, in your shared folder. It keeps running if you reload this page, and ends when you close it."),
    h("div", { class: "row" }, openBtn),
    h("label", { class: "check small" }, rootBox, " As administrator (root) inside the sandbox"),
  );

  let id = localStorage.getItem(KEY) ?? "";
  /** link is the connection to the shell: a WebSocket, or requests in a desktop window. */
  let link: Link | null = null;
  let term: Terminal | null = null;
  let fit: FitAddon | null = null;
  let retry: ReturnType<typeof setTimeout> | undefined;
  const enc = new TextEncoder();

  function setState(text: string, tone: "ok" | "busy" | "muted" | "bad"): void {
    state.replaceChildren(badge(text, tone));
    state.dataset.state = text;
  }

  function terminal(): Terminal {
    if (term) return term;
    term = new Terminal({
      cursorBlink: true,
      scrollback: 5000,
      fontFamily: '"JetBrains Mono", "DejaVu Sans Mono", Menlo, Consolas, monospace',
      fontSize: 13,
      lineHeight: 1.2,
      theme: { background: "#0f1720", foreground: "#d9e2ec", selectionBackground: "#2f4b66" },
      // The guest chooses OSC 8 link targets: xterm's default handler
      // opens http(s) ones only, after asking (the browser test checks).
    });
    fit = new FitAddon();
    term.loadAddon(fit);
    term.open(host);
    term.onData((s) => send(enc.encode(s)));
    term.onBinary((s) => send(Uint8Array.from(s, (c) => c.charCodeAt(0) & 0xff)));
    term.onResize(({ rows, cols }) => {
      size(rows, cols);
      control({ resize: { rows, cols } });
    });
    size(term.rows, term.cols);
    new ResizeObserver(() => refit()).observe(host);
    return term;
  }

  /** size shows the terminal's size on the element: tests compare it with `stty size`. */
  function size(rows: number, cols: number): void {
    host.dataset.rows = String(rows);
    host.dataset.cols = String(cols);
  }

  function refit(): void {
    if (host.hidden || !fit) return;
    try {
      fit.fit();
    } catch {
      /* not laid out yet */
    }
  }

  function send(b: Uint8Array): void {
    for (let i = 0; i < b.length; i += INPUT_CHUNK) link?.send(b.subarray(i, i + INPUT_CHUNK));
  }

  function control(c: TerminalControl): void {
    if (c.resize) link?.resize(c.resize.rows, c.resize.cols);
  }

  function remember(next: string): void {
    id = next;
    if (id) localStorage.setItem(KEY, id);
    else localStorage.removeItem(KEY);
    host.dataset.terminal = id;
    host.hidden = !id;
    empty.hidden = !!id;
    closeBtn.hidden = !id;
  }

  async function open(): Promise<void> {
    host.hidden = false;
    empty.hidden = true;
    const t = terminal();
    refit();
    const ok = await busy(
      openBtn,
      async () => {
        const task = await api.openTerminal({ rows: t.rows, cols: t.cols, root: rootBox.checked || undefined });
        store.putTask(task);
        remember(task.id);
        attach();
      },
      err,
    );
    if (!ok) remember("");
  }

  /** attach connects to the terminal; the server sends the recent screen first. */
  function attach(): void {
    clearTimeout(retry);
    if (!id) return;
    link?.close();
    link = null;
    terminal().reset();
    setState("Connecting", "busy");
    if (polled) attachPolled();
    else attachSocket();
  }

  function connected(): void {
    const t = terminal();
    setState("Connected", "ok");
    refit();
    control({ resize: { rows: t.rows, cols: t.cols } });
    t.focus();
  }

  function ended(): void {
    link = null;
    terminal().write("\r\n\x1b[90m[the shell ended]\x1b[0m\r\n");
    setState("Ended", "muted");
    forget();
  }

  /** lost asks whether the terminal is still there before trying again: a page cannot see why a WebSocket was refused. */
  function lost(): void {
    link = null;
    void api
      .task(id)
      .then((task) => {
        if (task.state === "running" || task.state === "queued") {
          setState("Reconnecting", "busy");
          retry = setTimeout(attach, 1000);
        } else ended();
      })
      .catch((e) => {
        if (e instanceof ApiError && e.status === 404) return ended();
        setState("Disconnected", "bad");
        err.textContent = message(e);
        retry = setTimeout(attach, 3000);
      });
  }

  function attachSocket(): void {
    const t = terminal();
    const ws = new WebSocket(api.terminalURL(id));
    ws.binaryType = "arraybuffer";
    const me: Link = {
      send: (b) => ws.readyState === WebSocket.OPEN && ws.send(b),
      resize: (rows, cols) => ws.readyState === WebSocket.OPEN && ws.send(JSON.stringify({ resize: { rows, cols } } satisfies TerminalControl)),
      close: () => ws.close(),
    };
    link = me;
    ws.onopen = connected;
    ws.onmessage = (e) => {
      if (e.data instanceof ArrayBuffer) t.write(new Uint8Array(e.data));
    };
    ws.onclose = (e) => {
      if (link !== me) return;
      if (e.code === ENDED) ended();
      else lost();
    };
  }

  /** attachPolled follows the terminal by requests: output by offset, input in order. */
  function attachPolled(): void {
    const t = terminal();
    const which = id;
    const ctl = new AbortController();
    const queue: Uint8Array[] = [];
    let sending = false;
    const flush = async () => {
      if (sending) return;
      sending = true;
      try {
        while (queue.length && !ctl.signal.aborted) await api.terminalInput(which, queue.shift()!);
      } catch {
        /* the output loop notices a terminal that is gone */
      } finally {
        sending = false;
      }
    };
    const me: Link = {
      send: (b) => {
        queue.push(b.slice());
        void flush();
      },
      resize: (rows, cols) => void api.terminalResize(which, rows, cols).catch(() => {}),
      close: () => ctl.abort(),
    };
    link = me;
    connected();
    void (async () => {
      let offset = -1;
      for (;;) {
        const o = await api.terminalOutput(which, offset, ctl.signal);
        if (link !== me) return;
        if (offset >= 0 && o.offset > offset) t.write("\r\n\x1b[90m[output skipped: more came than is kept]\x1b[0m\r\n");
        t.write(o.data);
        offset = o.next;
        if (o.ended) return ended();
      }
    })().catch(() => {
      if (link === me && !ctl.signal.aborted) lost();
    });
  }

  /** forget drops the ended terminal, keeping its last screen on show until another opens. */
  function forget(): void {
    id = "";
    localStorage.removeItem(KEY);
    closeBtn.hidden = true;
    empty.hidden = false;
  }

  async function close(): Promise<void> {
    const which = id;
    if (!which) return;
    await busy(
      closeBtn,
      async () => {
        try {
          await api.closeTerminal(which);
        } catch (e) {
          // Already gone is what closing wanted.
          if (!(e instanceof ApiError && e.status === 404)) throw e;
        }
        link?.close();
        link = null;
        remember("");
        setState("Closed", "muted");
      },
      err,
    );
  }

  const el = h(
    "div",
    { class: "page page-wide", "data-testid": "screen-terminal" },
    header("Terminal", "A shell inside the sandbox, in your shared folder."),
    h("section", { class: "card terminal-card" }, h("div", { class: "detail-head" }, h("div", { class: "detail-title" }, state), h("div", { class: "row" }, closeBtn)), err, empty, host),
  );

  remember(id);
  if (id) attach();
  else setState("No terminal", "muted");

  return {
    id: "terminal",
    title: "Terminal",
    icon: "terminal",
    el,
    update: () => {},
    shown: () =>
      requestAnimationFrame(() => {
        refit();
        term?.focus();
      }),
  };
}
