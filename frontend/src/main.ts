// Airlock's web UI: the same page runs in the desktop window (Wails) and in
// a browser against `airlock serve --http`.

import "./style.css";
import { takeTokenFromURL } from "./api";
import { askPanel } from "./asks";
import { fill, h, icon } from "./dom";
import { store } from "./store";
import type { View } from "./ui";
import { changesView } from "./views/changes";
import { machineBadge, machineView } from "./views/machine";
import { networkView } from "./views/network";
import { settingsView } from "./views/settings";
import { tasksView } from "./views/tasks";
import { terminalView } from "./views/terminal";
import { workspaceView } from "./views/workspace";

declare global {
  interface Window {
    /** Hooks for the desktop shell: a folder dropped on the window, for one. */
    airlockUI?: { setWorkspace(dir: string): Promise<boolean>; show(screen: string): void };
  }
}

takeTokenFromURL();

const ws = workspaceView();
const views: View[] = [ws, tasksView(), terminalView(), changesView(), networkView(), machineView(), settingsView()];
const asks = askPanel();

const nav = h("nav", { class: "nav", "aria-label": "Screens" });
const main = h("main", { class: "content" });
const foot = h("div", { class: "side-foot", "data-testid": "connection" });
const banner = h("div", { class: "banner", hidden: true, role: "alert" });

function current(): View {
  const id = location.hash.replace(/^#\/?/, "");
  return views.find((v) => v.id === id) ?? views[0];
}

function renderNav(): void {
  const cur = current();
  const running = store.status?.running_tasks ?? 0;
  fill(
    nav,
    views.map((v) =>
      h(
        "a",
        { href: `#/${v.id}`, class: `nav-item${v === cur ? " active" : ""}`, "data-testid": `nav-${v.id}`, "aria-current": v === cur ? "page" : undefined },
        icon(v.icon),
        h("span", null, v.title),
        v.id === "tasks" && running ? h("span", { class: "count" }, String(running)) : null,
        v.id === "changes" && store.pendingChanges
          ? h("span", { class: "count count-warn", "data-testid": "changes-badge", title: `${store.pendingChanges} changes wait for review` }, String(store.pendingChanges))
          : null,
        v.id === "network" && store.asks.size ? h("span", { class: "count count-warn" }, String(store.asks.size)) : null,
        v.id === "machine" && store.session ? h("span", { class: `dot tone-${machineTone()}` }) : null,
      ),
    ),
  );
}

function machineTone(): string {
  const st = store.session?.state;
  return st === "running" ? "ok" : st === "failed" ? "bad" : st === "stopped" ? "muted" : "busy";
}

function renderFoot(): void {
  const s = store.session;
  const wsName = (s?.workspace || "").split(/[\\/]/).filter(Boolean).pop();
  fill(
    foot,
    h("div", { class: "foot-ws" }, icon("folder", 15), h("span", { title: s?.workspace }, wsName ?? "No folder shared")),
    h("div", { class: "foot-state" }, machineBadge()),
  );
  banner.hidden = store.connected;
  fill(banner, store.connected ? null : h("span", null, store.status ? "Lost the connection to Airlock. Reconnecting…" : "Connecting to Airlock…", store.lastError ? h("span", { class: "muted small" }, ` (${store.lastError})`) : null));
}

function show(): void {
  const cur = current();
  for (const v of views) v.el.hidden = v !== cur;
  document.title = `${cur.title} · Airlock`;
  renderNav();
  cur.shown?.();
}

const app = h(
  "div",
  { class: "app" },
  h(
    "aside",
    { class: "side" },
    h("div", { class: "brand" }, h("div", { class: "logo" }, icon("shield", 20)), h("div", null, h("div", { class: "brand-name" }, "Airlock"), h("div", { class: "brand-sub" }, "Your sandbox"))),
    nav,
    foot,
  ),
  h("div", { class: "main-col" }, banner, asks.el, main),
);
for (const v of views) main.appendChild(v.el);
document.body.appendChild(app);

window.addEventListener("hashchange", show);
store.on((t) => {
  for (const v of views) v.update(t);
  if (t === "asks") asks.update();
  if (t === "status" || t === "asks" || t === "tasks" || t === "changes") renderNav();
  if (t === "status" || t === "conn") renderFoot();
});
window.airlockUI = {
  setWorkspace: (dir) => {
    location.hash = "#/workspace";
    return ws.setFolder(dir);
  },
  show: (screen) => {
    location.hash = `#/${screen}`;
  },
};

// In the desktop window, a folder dropped anywhere on it becomes the
// workspace (the Wails runtime gives paths; a browser only gives contents).
// A dropped file is refused by the service and shown inline, like a typed one.
type WailsRuntime = { OnFileDrop?: (cb: (x: number, y: number, paths: string[]) => void, useDropTarget: boolean) => void };
const wailsRuntime = (window as unknown as { runtime?: WailsRuntime }).runtime;
wailsRuntime?.OnFileDrop?.((_x, _y, paths) => {
  if (paths.length > 0) void window.airlockUI?.setWorkspace(paths[0]);
}, false);

show();
renderFoot();
void store.follow();
setInterval(() => {
  if (store.connected) void store.refreshStatus().catch(() => {});
}, 5000);
