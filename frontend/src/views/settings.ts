// Settings and About: the sandbox's size, where Airlock keeps things, versions.

import { native } from "../api";
import { fill, h } from "../dom";
import { memory } from "../format";
import { store } from "../store";
import { card, header, pathLine, type View } from "../ui";
import { agentsCard } from "./agents";

declare const __AIRLOCK_UI_VERSION__: string;

export function settingsView(): View {
  const size = h("dl", { class: "facts" });
  const places = h("div", { class: "places", "data-testid": "about-places" });
  const versions = h("dl", { class: "facts", "data-testid": "about-versions" });
  const agents = agentsCard();

  function join(dir: string, name: string): string {
    if (!dir) return "";
    return dir + (dir.includes("\\") ? "\\" : "/") + name;
  }

  function render(): void {
    const st = store.status;
    if (!st) return;
    const s = st.session;
    fill(
      size,
      h("dt", null, "Processors"),
      h("dd", null, String(st.settings.cpus)),
      h("dt", null, "Memory"),
      h("dd", null, memory(st.settings.memory_mib)),
      h("dt", null, "Shared folder"),
      h("dd", { class: "mono" }, st.settings.workspace || "none yet"),
      h("dt", null, "Folder access"),
      h("dd", null, st.settings.read_only ? "Read only" : "Read and write"),
    );
    const key = [st.state_dir, s.console_log, st.settings_path].join("\0");
    if (places.dataset.key !== key) {
      places.dataset.key = key;
      fill(
      places,
      place("Airlock's data", "Task history and everything Airlock keeps between runs.", st.state_dir, "about-state-dir"),
      place("Task output", "Each task's output, saved as it arrives.", join(st.state_dir, "tasks")),
      place("Console log", "What the sandbox prints while it boots and runs.", s.console_log ?? "", "about-console-log"),
      st.settings_path ? place("Settings file", "Size, folder and network rules.", st.settings_path) : null,
      );
    }
    fill(
      versions,
      st.version ? [h("dt", null, "Airlock"), h("dd", { "data-testid": "about-version" }, st.version)] : null,
      h("dt", null, "This interface"),
      h("dd", null, __AIRLOCK_UI_VERSION__),
      h("dt", null, "Running in"),
      h("dd", null, native() ? "Desktop app" : "Web browser"),
      h("dt", null, "Acceleration"),
      h("dd", null, s.accelerator === "kvm" ? "Hardware (KVM)" : s.accelerator === "tcg" ? "Emulated (TCG)" : s.accelerator || "—"),
    );
  }

  function place(title: string, about: string, path: string, testid?: string): HTMLElement {
    return h("div", { class: "place" }, h("div", null, h("strong", null, title), h("p", { class: "muted small" }, about)), pathLine(path, testid));
  }

  const el = h(
    "div",
    { class: "page", "data-testid": "screen-settings" },
    header("Settings", "How the sandbox is set up, where Airlock keeps its files, and which version this is."),
    h("div", { class: "grid-2" }, card("Sandbox", size, h("p", { class: "hint" }, "Processors and memory are read from the settings file when the sandbox starts.")), card("About Airlock", versions, h("p", { class: "hint" }, "Airlock gives tasks a disposable Linux computer that sees one folder, and only the websites you allow."))),
    agents.el,
    card("Where things are", places),
  );
  render();
  return { id: "settings", title: "Settings", icon: "settings", el, update: (t) => t === "status" && render(), shown: () => void agents.refresh() };
}
