// Workspace: the one folder the sandbox sees.

import { api, native } from "../api";
import { fill, h, icon } from "../dom";
import { store } from "../store";
import { badge, busy, button, card, header, type View } from "../ui";

const RECENT_KEY = "airlock.recentFolders";
const MAX_RECENT = 8;

export function recentFolders(): string[] {
  try {
    const v = JSON.parse(localStorage.getItem(RECENT_KEY) ?? "[]");
    return Array.isArray(v) ? v.filter((x): x is string => typeof x === "string") : [];
  } catch {
    return [];
  }
}

function remember(dir: string): void {
  const list = [dir, ...recentFolders().filter((d) => d !== dir)].slice(0, MAX_RECENT);
  localStorage.setItem(RECENT_KEY, JSON.stringify(list));
}

function forget(dir: string): void {
  localStorage.setItem(RECENT_KEY, JSON.stringify(recentFolders().filter((d) => d !== dir)));
}

function baseName(p: string): string {
  const parts = p.split(/[\\/]/).filter(Boolean);
  return parts[parts.length - 1] ?? p;
}

export function workspaceView(): View & { setFolder(dir: string): Promise<boolean> } {
  const current = h("div", { class: "ws-current" });
  const pathInput = h("input", {
    type: "text",
    class: "input mono",
    placeholder: "/home/you/Documents/reports",
    "aria-label": "Folder path",
    "data-testid": "ws-path",
    spellcheck: "false",
    autocomplete: "off",
  });
  const readOnly = h("input", { type: "checkbox", "data-testid": "ws-readonly", role: "switch" });
  const err = h("p", { class: "field-error", role: "alert", "data-testid": "ws-error" });
  const shareBtn = button("Share this folder", { variant: "primary", type: "submit", testid: "ws-share" });
  const chooseBtn = native()?.chooseFolder
    ? button("Choose…", {
        icon: "folder",
        testid: "ws-choose",
        onClick: async () => {
          const dir = await native()!.chooseFolder!();
          if (dir) {
            pathInput.value = dir;
            await setFolder(dir);
          }
        },
      })
    : null;
  const statement = h("div", { class: "statement", "data-testid": "ws-statement" });
  const recent = h("ul", { class: "recent", "data-testid": "ws-recent" });
  const warn = h("p", { class: "hint" });
  const formLabel = h("label", { class: "label", for: "ws-path" }, "Share a folder");

  async function setFolder(dir: string, ro = readOnly.checked): Promise<boolean> {
    dir = dir.trim();
    if (!dir) {
      err.textContent = "Type the full path of a folder, for example /home/you/Documents/reports.";
      pathInput.focus();
      return false;
    }
    const ok = await busy(
      shareBtn,
      async () => {
        const st = await api.setWorkspace(dir, ro);
        store.setStatus(st);
        remember(st.settings.workspace || dir);
      },
      err,
    );
    if (ok) {
      pathInput.value = "";
      renderRecent();
    } else {
      pathInput.classList.add("input-error");
      pathInput.focus();
    }
    return ok;
  }

  const form = h(
    "form",
    {
      class: "ws-form",
      onsubmit: (e: SubmitEvent) => {
        e.preventDefault();
        void setFolder(pathInput.value);
      },
    },
    formLabel,
    h("div", { class: "row" }, pathInput, chooseBtn, shareBtn),
    err,
    h(
      "label",
      { class: "switch" },
      readOnly,
      h("span", { class: "switch-track" }),
      h("span", null, h("strong", null, "Read only"), " — tasks can open files here but never change, add or delete them"),
    ),
    warn,
  );
  pathInput.id = "ws-path";
  pathInput.addEventListener("input", () => {
    pathInput.classList.remove("input-error");
    err.textContent = "";
  });
  readOnly.addEventListener("change", async () => {
    const ws = store.session?.workspace;
    if (!ws) return; // applies with the next folder
    const want = readOnly.checked;
    const ok = await busy(null, async () => store.setStatus(await api.setWorkspace(ws, want)), err);
    if (!ok) readOnly.checked = !want;
  });

  function renderRecent(): void {
    const ws = store.session?.workspace;
    const list = recentFolders().filter((d) => d !== ws);
    const key = JSON.stringify(list);
    if (recent.dataset.key === key) return;
    recent.dataset.key = key;
    fill(
      recent,
      list.length === 0
        ? h("li", { class: "empty" }, "Folders you share appear here.")
        : list.map((d) =>
            h(
              "li",
              null,
              h(
                "button",
                { type: "button", class: "recent-item", title: `Share ${d}`, onclick: () => void setFolder(d) },
                icon("folder", 16),
                h("span", { class: "recent-name" }, baseName(d)),
                h("span", { class: "recent-path mono" }, d),
              ),
              h("button", { type: "button", class: "icon-btn", title: "Remove from this list", "aria-label": `Forget ${d}`, onclick: () => (forget(d), renderRecent()) }, icon("cross", 14)),
            ),
          ),
    );
  }

  function render(): void {
    const s = store.session;
    const st = store.settings;
    const ws = s?.workspace || st?.workspace || "";
    const ro = s ? s.read_only : (st?.read_only ?? false);
    if (document.activeElement !== readOnly) readOnly.checked = ro;
    fill(
      current,
      h("div", { class: "ws-icon" }, icon("folder", 28)),
      ws
        ? h(
            "div",
            { class: "ws-text" },
            h("div", { class: "ws-name", "data-testid": "ws-name" }, baseName(ws)),
            h("code", { class: "ws-path mono", "data-testid": "ws-current" }, ws),
          )
        : h("div", { class: "ws-text" }, h("div", { class: "ws-name" }, "No folder shared yet"), h("p", { class: "muted" }, "Choose the folder your tasks should work in. Nothing else on this computer will be visible to them.")),
      ws ? badge(ro ? "Read only" : "Read and write", ro ? "info" : "ok", "ws-mode") : null,
    );
    const allow = st?.allow?.length ?? 0;
    fill(
      statement,
      h("h3", null, "What tasks can see"),
      h(
        "ul",
        { class: "can" },
        h("li", null, icon("check", 16), ws ? h("span", null, "Everything in ", h("strong", null, baseName(ws)), " and its subfolders, shown to them as ", h("code", null, "/workspace")) : h("span", null, "Only the folder you share — none yet")),
        h("li", null, icon("check", 16), ro ? "They can read those files, but cannot change, add or delete anything" : "They can read, change, add and delete files in that folder"),
        h("li", null, icon("check", 16), allow ? `The ${allow} site${allow === 1 ? "" : "s"} you allow on the Network page` : "No websites yet — you allow them on the Network page"),
      ),
      h("h3", null, "What tasks cannot see"),
      h(
        "ul",
        { class: "cannot" },
        h("li", null, icon("cross", 16), "Any other folder: your home folder, documents, other drives"),
        h("li", null, icon("cross", 16), "Your passwords, keychain, browser profiles and apps"),
        h("li", null, icon("cross", 16), "Your local network, and any website you have not allowed"),
      ),
    );
    formLabel.textContent = ws ? "Share a different folder" : "Share a folder";
    warn.textContent = (store.status?.running_tasks ?? 0) > 0 ? "Sharing another folder restarts the sandbox: running tasks will stop." : "";
    renderRecent();
  }

  const el = h(
    "div",
    { class: "page", "data-testid": "screen-workspace" },
    header("Workspace", "The one folder your tasks can work in."),
    h("div", { class: "grid-2" }, h("div", { class: "stack" }, card(null, current, form), card("Recent folders", recent)), card(null, statement)),
  );
  render();
  return {
    id: "workspace",
    title: "Workspace",
    icon: "folder",
    el,
    update: (t) => {
      if (t === "status") render();
    },
    setFolder: (dir: string) => {
      pathInput.value = dir;
      return setFolder(dir);
    },
  };
}
