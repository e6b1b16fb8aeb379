// Machine: the sandbox computer's state, boot progress, size and controls.

import { api, native, type SessionStatus } from "../api";
import { fill, h } from "../dom";
import { duration, memory, sessionLabel } from "../format";
import { store } from "../store";
import { badge, busy, button, card, header, pathLine, type Tone, type View } from "../ui";
import { imageCard } from "./image";
import { sizeForm } from "./size";

// The boot phases in order (app/session/status.go).
const PHASES = ["preparing", "creating machine", "starting machine", "waiting for guest", "connecting to agent"];

const PHASE_LABEL: Record<string, string> = {
  preparing: "Preparing",
  "creating machine": "Creating the sandbox",
  "starting machine": "Switching it on",
  "waiting for guest": "Waiting for Linux to boot",
  "connecting to agent": "Connecting",
  "stopping machine": "Shutting down",
  "waiting to retry": "Waiting before the next try",
};

export function stateTone(s: SessionStatus | undefined): Tone {
  switch (s?.state) {
    case "running":
      return "ok";
    case "starting":
    case "restarting":
    case "stopping":
      return "busy";
    case "failed":
      return "bad";
  }
  return "muted";
}

export function machineView(): View {
  const hero = h("div", { class: "hero" });
  const facts = h("dl", { class: "facts", "data-testid": "vm-facts" });
  const errorBox = h("div");
  const start = button("Start", { variant: "primary", icon: "play", testid: "vm-start", onClick: () => void act("start", start) });
  const stop = button("Stop", { icon: "stop", testid: "vm-stop", onClick: () => void act("stop", stop) });
  const restart = button("Restart", { icon: "restart", testid: "vm-restart", onClick: () => void act("restart", restart) });
  const consoleBox = h("div");
  const image = imageCard();
  const size = sizeForm();

  async function act(action: "start" | "stop" | "restart", btn: HTMLButtonElement): Promise<void> {
    await busy(btn, async () => store.setStatus(await api.vm(action)));
  }

  function elapsedNs(s: SessionStatus): number {
    return s.elapsed_ns + (Date.now() - store.statusAt) * 1e6;
  }

  function render(): void {
    const s = store.session;
    if (!s) return;
    image.render();
    size.render();
    const tone = stateTone(s);
    const starting = s.state === "starting";
    const idx = starting ? Math.max(0, PHASES.indexOf(s.phase ?? "")) : s.state === "running" ? PHASES.length : 0;
    const pct = s.state === "running" ? 100 : starting ? Math.round(((idx + 0.5) / PHASES.length) * 100) : 0;
    let detail = "";
    if (starting || s.state === "restarting" || s.state === "stopping") {
      detail = `${PHASE_LABEL[s.phase ?? ""] ?? s.phase ?? ""} · ${duration(elapsedNs(s))}`;
      if (s.retry_in_ns) detail += ` · next try in ${duration(s.retry_in_ns)}`;
    } else if (s.state === "running") {
      detail = `Up for ${duration(s.uptime_ns + (Date.now() - store.statusAt) * 1e6)}${s.boot_time_ns ? ` · started in ${duration(s.boot_time_ns)}` : ""}`;
    } else if (s.state === "stopped") {
      detail = "It starts by itself when a task needs it, or press Start.";
    } else if (s.state === "failed") {
      detail = "Airlock gave up after several tries. Press Start to try again.";
    }
    fill(
      hero,
      h("div", { class: `hero-dot tone-${tone}` }),
      h(
        "div",
        { class: "hero-text" },
        h("div", { class: "hero-state", "data-testid": "vm-state", "data-state": s.state }, sessionLabel[s.state] ?? s.state),
        h("div", { class: "hero-detail", "data-testid": "vm-detail" }, detail),
        starting || s.state === "restarting"
          ? h(
              "div",
              { class: "progress", role: "progressbar", "aria-valuenow": String(pct), "aria-valuemin": "0", "aria-valuemax": "100" },
              h("div", { class: "progress-bar", style: `width:${pct}%` }),
            )
          : null,
        starting
          ? h(
              "ol",
              { class: "phases" },
              PHASES.map((p, i) => h("li", { class: i < idx ? "done" : i === idx ? "now" : "" }, PHASE_LABEL[p])),
            )
          : null,
      ),
    );
    const accel = s.accelerator === "kvm" ? "Hardware (KVM)" : s.accelerator === "tcg" ? "Emulated (slower)" : s.accelerator || "—";
    fill(
      facts,
      fact("Processors", String(s.cpus), "vm-cpus"),
      fact("Memory", memory(s.memory_mib), "vm-memory"),
      fact("Acceleration", accel),
      fact("Last start took", s.boot_time_ns ? duration(s.boot_time_ns) : "—"),
      fact("Restarts after a crash", String(s.restarts)),
      fact("Running tasks", String(store.status?.running_tasks ?? 0)),
    );
    fill(
      errorBox,
      s.last_error
        ? h(
            "div",
            { class: `callout ${s.state === "failed" ? "callout-bad" : "callout-warn"}`, "data-testid": "vm-error" },
            h("strong", null, s.state === "failed" ? "Why it stopped" : "Last problem"),
            h("p", { class: "mono small" }, s.last_error),
          )
        : null,
    );
    const st = s.state;
    start.disabled = st === "running" || st === "starting" || st === "stopping";
    stop.disabled = st === "stopped" || st === "stopping";
    restart.disabled = st === "stopping" || st === "stopped";
    if (consoleBox.dataset.path === (s.console_log ?? "")) return;
    consoleBox.dataset.path = s.console_log ?? "";
    fill(
      consoleBox,
      h("p", { class: "muted" }, "What the sandbox prints while it boots and runs. Useful when it will not start."),
      pathLine(s.console_log ?? "", "vm-console-log"),
      s.console_log && native()?.openPath ? button("Open console log", { onClick: () => void native()!.openPath!(s.console_log!) }) : null,
    );
  }

  function fact(label: string, value: string, testid?: string): HTMLElement[] {
    return [h("dt", null, label), h("dd", { "data-testid": testid }, value)];
  }

  // Elapsed and uptime count on between events.
  setInterval(() => {
    const st = store.session?.state;
    if (el.isConnected && !el.hidden && (st === "starting" || st === "running" || st === "restarting")) render();
  }, 1000);

  const el = h(
    "div",
    { class: "page", "data-testid": "screen-machine" },
    header("Machine", "The private Linux computer your tasks run in. Airlock starts and stops it for you.", start, stop, restart),
    card(null, hero, errorBox),
    h("div", { class: "grid-2" }, card("Size", facts, size.el), card("Console log", consoleBox)),
    image.el,
  );
  render();
  return { id: "machine", title: "Machine", icon: "machine", el, update: (t) => t === "status" && render() };
}

export function machineBadge(): HTMLElement {
  const s = store.session;
  return badge(s ? (sessionLabel[s.state] ?? s.state) : "…", stateTone(s));
}
