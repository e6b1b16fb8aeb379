// Changes: what tasks changed in the shared folder, held for review in
// review and auto mode; apply or discard them, and undo an application.
//
// Every path, link target and line of diff here is chosen by the guest: it
// reaches the page only as text (the dom helpers, textContent), never as
// markup, and image previews are blobs shown in an <img>.

import { api, type ApplyResult, type ChangeEntry, type ChangesMode, type Checkpoint, type ChangesUsage } from "../api";
import { inline, parseDiff, split } from "../diff";
import { fill, h, icon } from "../dom";
import { ago, bytes, clock } from "../format";
import { store } from "../store";
import { badge, busy, button, card, confirmDialog, header, message, toast, type Tone, type View } from "../ui";

/** PAGE is how many changes the list draws at a time; "Show more" adds as many again. */
export const PAGE = 200;
const MAX_DIFF_LINES = 5000;
const MAX_PREVIEW_BYTES = 16 << 20;
const IMAGE_NAME = /\.(png|jpe?g|gif|webp|bmp|ico)$/i;
const IMAGE_TYPES = new Set(["image/png", "image/jpeg", "image/gif", "image/webp", "image/bmp", "image/x-icon", "image/vnd.microsoft.icon"]);
const LAYOUT_KEY = "airlock.diffLayout";

const MODES: { id: ChangesMode; name: string; about: string }[] = [
  { id: "review", name: "Review", about: "Tasks write beside your folder, not into it. Nothing reaches your folder until you apply it here." },
  { id: "auto", name: "Auto", about: "What a task changed is applied once no task runs, each time as a checkpoint you can undo. Conflicts and files your tools run on this computer wait here for you." },
  { id: "direct", name: "Direct", about: "Tasks change your folder directly, as they write. Nothing to review, and nothing to undo." },
];

const KIND: Record<string, { label: string; tone: Tone }> = {
  added: { label: "Added", tone: "ok" },
  modified: { label: "Modified", tone: "info" },
  deleted: { label: "Deleted", tone: "bad" },
  renamed: { label: "Renamed", tone: "info" },
  mode: { label: "Permissions", tone: "muted" },
};

function kindBadge(e: ChangeEntry): HTMLElement {
  const k = KIND[e.kind] ?? { label: e.kind, tone: "muted" as Tone };
  return badge(k.label, k.tone);
}

function plural(n: number, one: string, many = `${one}s`): string {
  return `${n.toLocaleString()} ${n === 1 ? one : many}`;
}

/** summary is the one line the screen says of a change that has no diff or preview. */
function summary(e: ChangeEntry): string {
  const k = (KIND[e.kind]?.label ?? e.kind).toLowerCase();
  if (e.kind === "deleted") return `Deleted from your folder when you apply it.`;
  if (e.type === "dir") return `Folder, ${k}.`;
  if (e.type === "symlink") return `Link to ${e.link ?? "(nowhere)"}, ${k}.`;
  if (e.kind === "mode") return `Only the permissions change, to ${((e.mode ?? 0) & 0o777).toString(8).padStart(3, "0")}.`;
  return `${e.text ? "Text" : "Binary"} file, ${bytes(e.size)}, ${k}.`;
}

export function changesView(): View {
  let selected = new Set<string>();
  let focused = "";
  let shown = PAGE;
  let layout: "inline" | "split" = localStorage.getItem(LAYOUT_KEY) === "split" ? "split" : "inline";
  let checkpoints: Checkpoint[] = [];
  let usage: ChangesUsage | undefined;
  let detailCtl: AbortController | null = null;
  let previewURL = "";

  // Mode.
  const modeSeg = h("div", { class: "segmented", role: "group", "aria-label": "How tasks change this folder" });
  const modeButtons = MODES.map((m) =>
    h("button", { type: "button", "data-mode": m.id, "data-testid": `changes-mode-${m.id}`, onclick: () => void setMode(m.id) }, m.name),
  );
  modeSeg.append(...modeButtons);
  const modeAbout = h("p", { class: "hint", "data-testid": "changes-mode-about" });
  const modeErr = h("p", { class: "field-error", role: "alert", "data-testid": "changes-mode-error" });

  // The list.
  const selectAll = h("input", { type: "checkbox", "data-testid": "changes-select-all", "aria-label": "Select every change" });
  const count = h("span", { class: "muted", "data-testid": "changes-count-text" });
  const list = h("ul", { class: "change-list", "data-testid": "changes-list", "aria-label": "Pending changes" });
  const more = button("Show more", { variant: "ghost", testid: "changes-more", onClick: () => ((shown += PAGE), renderList()) });
  const listErr = h("p", { class: "field-error", role: "alert", "data-testid": "changes-error" });
  const result = h("div", { "data-testid": "changes-result", "aria-live": "polite" });
  const applySel = button("Apply selected", { variant: "primary", icon: "check", testid: "changes-apply-selected", onClick: () => void apply([...selected], false, applySel) });
  const applyAll = button("Apply all", { icon: "check", testid: "changes-apply-all", onClick: () => void apply(allPaths(), false, applyAll) });
  const discardSel = button("Discard selected", { variant: "danger", icon: "trash", testid: "changes-discard-selected", onClick: () => void discard([...selected], discardSel) });
  const discardAll = button("Discard all", { variant: "danger", icon: "trash", testid: "changes-discard-all", onClick: () => void discard(allPaths(), discardAll) });
  const empty = h("div", { class: "empty-state", "data-testid": "changes-empty" });

  // The detail of one change.
  const detail = h("div", { class: "change-detail", "data-testid": "change-detail", hidden: true });
  const detailHead = h("div", { class: "detail-head" });
  const detailBody = h("div", { class: "change-body", "data-testid": "change-body" });
  const layoutSeg = h("div", { class: "segmented", role: "group", "aria-label": "Diff layout" });
  const layoutButtons = (["inline", "split"] as const).map((l) =>
    h("button", { type: "button", "data-layout": l, "data-testid": `diff-${l}`, onclick: () => setLayout(l) }, l === "inline" ? "Inline" : "Side by side"),
  );
  layoutSeg.append(...layoutButtons);
  detail.append(detailHead, detailBody);
  const noDetail = h("div", { class: "empty-state" }, h("h3", null, "Pick a change"), h("p", null, "Its diff, or a preview of an image, shows here."));

  // Checkpoints.
  const cpList = h("ul", { class: "checkpoints", "data-testid": "checkpoints" });
  const usageLine = h("div", { class: "usage", "data-testid": "changes-usage" });
  const cpErr = h("p", { class: "field-error", role: "alert", "data-testid": "checkpoints-error" });

  function entries(): ChangeEntry[] {
    return store.changes?.entries ?? [];
  }

  function allPaths(): string[] {
    return entries().map((e) => e.path);
  }

  function mode(): ChangesMode | undefined {
    const dir = store.session?.workspace || store.settings?.workspace;
    if (!dir) return undefined;
    return store.changes?.mode ?? store.settings?.changes?.[dir] ?? "auto";
  }

  async function setMode(m: ChangesMode): Promise<void> {
    const dir = store.session?.workspace || store.settings?.workspace;
    if (!dir) return;
    const btn = modeButtons.find((b) => b.dataset.mode === m) ?? null;
    const ok = await busy(btn, async () => store.setStatus(await api.setWorkspace(dir, store.session?.read_only ?? store.settings?.read_only ?? false, m)), modeErr);
    if (ok) await store.refreshChanges();
    renderMode();
  }

  function renderMode(): void {
    const m = mode();
    const dir = store.session?.workspace || store.settings?.workspace;
    const ro = store.session?.read_only ?? store.settings?.read_only ?? false;
    for (const b of modeButtons) {
      b.classList.toggle("on", b.dataset.mode === m);
      b.setAttribute("aria-pressed", String(b.dataset.mode === m));
      b.disabled = !dir || ro;
    }
    const running = store.session?.state === "running" || store.session?.state === "starting";
    modeAbout.textContent = !dir
      ? "Share a folder first, on the Workspace screen."
      : ro
        ? "This folder is shared read only: tasks cannot change anything in it."
        : `${MODES.find((x) => x.id === m)?.about ?? ""}${running ? " Changing this restarts the sandbox." : ""}`;
  }

  function toggle(path: string, on: boolean): void {
    if (on) selected.add(path);
    else selected.delete(path);
    renderSelection();
  }

  function renderSelection(): void {
    const n = entries().length;
    const k = selected.size;
    selectAll.checked = n > 0 && k === n;
    selectAll.indeterminate = k > 0 && k < n;
    selectAll.disabled = n === 0;
    applySel.disabled = discardSel.disabled = k === 0;
    applyAll.disabled = discardAll.disabled = n === 0;
    applySel.textContent = "";
    applySel.append(icon("check", 16), k ? `Apply ${plural(k, "selected")}` : "Apply selected");
    discardSel.textContent = "";
    discardSel.append(icon("trash", 16), k ? `Discard ${plural(k, "selected")}` : "Discard selected");
    for (const cb of list.querySelectorAll<HTMLInputElement>("input[data-path]")) cb.checked = selected.has(cb.dataset.path!);
  }

  selectAll.addEventListener("change", () => {
    selected = selectAll.checked ? new Set(allPaths()) : new Set();
    renderSelection();
  });

  /** row draws one change: a checkbox to select it and a button that opens it. */
  function row(e: ChangeEntry): HTMLElement {
    const cb = h("input", { type: "checkbox", "data-path": e.path, "data-testid": "change-select", "aria-label": `Select ${e.path}`, checked: selected.has(e.path) });
    cb.addEventListener("change", () => toggle(e.path, cb.checked));
    const lines =
      e.text && (e.lines_added || e.lines_removed)
        ? h("span", { class: "lines", "aria-label": `${e.lines_added ?? 0} lines added, ${e.lines_removed ?? 0} removed` }, e.lines_added ? h("span", { class: "add" }, `+${e.lines_added}`) : null, e.lines_added && e.lines_removed ? " " : null, e.lines_removed ? h("span", { class: "del" }, `−${e.lines_removed}`) : null)
        : null;
    const open = h(
      "button",
      { type: "button", class: "change-open", "data-testid": "change-open", "aria-current": e.path === focused ? "true" : undefined, onclick: () => openChange(e.path) },
      h("span", { class: "change-line" }, kindBadge(e), h("code", { class: "change-path", "data-testid": "change-path", title: e.path }, e.path)),
      h(
        "span",
        { class: "change-meta" },
        e.from ? h("span", { class: "muted" }, "from ", h("code", null, e.from)) : null,
        e.conflict ? badge("Conflict", "bad", "change-conflict") : null,
        e.host_runs ? h("span", { title: "Your tools run this file on this computer (git hooks, .envrc, editor settings). Read it before you apply it; auto mode never applies it." }, badge("Runs on this computer", "warn", "change-host-runs")) : null,
        e.type === "file" && e.kind !== "deleted" ? h("span", { class: "muted" }, bytes(e.size)) : null,
        lines,
      ),
    );
    return h("li", { class: `change${e.path === focused ? " selected" : ""}`, "data-testid": "change", "data-path": e.path, "data-kind": e.kind }, cb, open);
  }

  // Up and down move between changes, keeping to the same column.
  list.addEventListener("keydown", (ev: KeyboardEvent) => {
    if (ev.key !== "ArrowDown" && ev.key !== "ArrowUp" && ev.key !== "Home" && ev.key !== "End") return;
    const t = ev.target as HTMLElement;
    const li = t.closest("li.change");
    if (!li) return;
    const items = [...list.querySelectorAll<HTMLElement>("li.change")];
    let i = items.indexOf(li as HTMLElement);
    i = ev.key === "ArrowDown" ? i + 1 : ev.key === "ArrowUp" ? i - 1 : ev.key === "Home" ? 0 : items.length - 1;
    const next = items[Math.max(0, Math.min(items.length - 1, i))];
    const target = next?.querySelector<HTMLElement>(t.tagName === "INPUT" ? "input" : "button");
    if (target) {
      ev.preventDefault();
      target.focus();
      if (target.tagName === "BUTTON") openChange(next.dataset.path!);
    }
  });

  let listedFor = "";

  function renderList(): void {
    // Another folder's changes share nothing with these: start afresh.
    const dir = store.session?.workspace || store.settings?.workspace || "";
    if (dir !== listedFor) {
      listedFor = dir;
      selected.clear();
      shown = PAGE;
      fill(result);
      closeDetail();
    }
    const all = entries();
    const paths = new Set(all.map((e) => e.path));
    for (const p of [...selected]) if (!paths.has(p)) selected.delete(p);
    // Keep the keyboard where it was across a redraw.
    const active = document.activeElement as HTMLElement | null;
    const activePath = active && list.contains(active) ? active.closest<HTMLElement>("li.change")?.dataset.path : undefined;
    const activeTag = active?.tagName === "INPUT" ? "input" : "button";

    count.textContent = all.length ? `${plural(all.length, "change")} waiting` : "";
    const draw = all.slice(0, shown);
    fill(list, draw.map(row));
    const hidden = all.length - draw.length;
    more.hidden = hidden <= 0;
    more.textContent = hidden > 0 ? `Show ${Math.min(PAGE, hidden).toLocaleString()} more (${hidden.toLocaleString()} not shown)` : "";
    list.hidden = all.length === 0;
    empty.hidden = all.length > 0;
    const m = mode();
    fill(
      empty,
      !dir
        ? [h("h3", null, "No folder shared"), h("p", null, "Share a folder on the Workspace screen; what tasks change in it shows up here.")]
        : store.changesError
        ? [h("h3", null, "Could not read the changes"), h("p", null, store.changesError)]
        : m === "direct"
          ? [h("h3", null, "Nothing to review"), h("p", null, "In direct mode tasks change your folder as they write.")]
          : [h("h3", null, "No changes waiting"), h("p", null, m === "auto" ? "What tasks change is applied when they finish; anything that needs you waits here." : "When a task changes a file in your folder, it waits here for you.")],
    );
    if (activePath) list.querySelector<HTMLElement>(`li.change[data-path="${CSS.escape(activePath)}"] ${activeTag}`)?.focus();
    renderSelection();
    if (focused && !paths.has(focused)) closeDetail();
  }

  function closeDetail(): void {
    focused = "";
    detailCtl?.abort();
    if (previewURL) URL.revokeObjectURL(previewURL);
    previewURL = "";
    detail.hidden = true;
    noDetail.hidden = false;
  }

  function setLayout(l: "inline" | "split"): void {
    layout = l;
    localStorage.setItem(LAYOUT_KEY, l);
    if (focused) openChange(focused);
  }

  function openChange(path: string): void {
    const e = entries().find((x) => x.path === path);
    if (!e) return;
    focused = path;
    for (const li of list.querySelectorAll<HTMLElement>("li.change")) {
      const on = li.dataset.path === path;
      li.classList.toggle("selected", on);
      const b = li.querySelector("button");
      if (on) b?.setAttribute("aria-current", "true");
      else b?.removeAttribute("aria-current");
    }
    detailCtl?.abort();
    const ctl = (detailCtl = new AbortController());
    if (previewURL) URL.revokeObjectURL(previewURL);
    previewURL = "";
    detail.hidden = false;
    noDetail.hidden = true;
    detail.dataset.path = path;

    for (const b of layoutButtons) {
      b.classList.toggle("on", b.dataset.layout === layout);
      b.setAttribute("aria-pressed", String(b.dataset.layout === layout));
    }
    const force = button("Apply anyway", { variant: "danger", testid: "change-force", title: "Apply this change over your version; your version is kept in the checkpoint", onClick: () => void apply([path], true, force) });
    fill(
      detailHead,
      h(
        "div",
        { class: "detail-title" },
        h("code", { class: "detail-cmd", "data-testid": "change-detail-path", title: e.path }, e.path),
        h("div", { class: "detail-meta" }, kindBadge(e), e.from ? h("span", { class: "muted" }, "from ", h("code", null, e.from)) : null, h("span", { class: "muted", "data-testid": "change-summary" }, summary(e))),
      ),
      layoutSeg,
    );
    const notes: HTMLElement[] = [];
    if (e.conflict) {
      notes.push(
        h(
          "div",
          { class: "callout callout-bad", "data-testid": "change-conflict-note" },
          h("strong", null, "You changed this file on your computer after the sandbox read it."),
          h("p", null, "Apply leaves your version alone and keeps this change waiting. Apply anyway puts the sandbox's version in your folder and keeps yours in the checkpoint, so Undo brings it back."),
          h("div", { class: "row" }, force),
        ),
      );
    }
    if (e.host_runs) {
      notes.push(
        h(
          "div",
          { class: "callout callout-warn", "data-testid": "change-host-runs-note" },
          h("strong", null, "Your tools run this file on this computer."),
          h("p", null, "Git hooks, .envrc, editor settings and the like run outside the sandbox. Read the change before you apply it; auto mode never applies it for you."),
        ),
      );
    }
    const body = h("div", { class: "change-view", "data-testid": "change-view" }, h("p", { class: "muted" }, "Loading…"));
    fill(detailBody, notes, body);

    const show = (...c: (Node | string | null)[]) => {
      if (!ctl.signal.aborted) fill(body, ...c);
    };
    const failed = (err: unknown) => {
      if (!ctl.signal.aborted) show(h("p", { class: "field-error", role: "alert" }, `Could not show this change: ${message(err)}`));
    };
    if (e.type === "dir" || e.type === "symlink" || e.kind === "mode") {
      show(h("p", { class: "summary-line", "data-testid": "change-oneline" }, summary(e)));
    } else if (e.kind !== "deleted" && IMAGE_NAME.test(e.path) && e.size <= MAX_PREVIEW_BYTES) {
      api
        .content(path, ctl.signal)
        .then((blob) => {
          // The service sniffs the type; anything but an image stays a summary.
          if (!IMAGE_TYPES.has(blob.type)) return show(h("p", { class: "summary-line", "data-testid": "change-oneline" }, summary(e)));
          previewURL = URL.createObjectURL(blob);
          show(h("div", { class: "preview" }, h("img", { src: previewURL, alt: `Preview of ${e.path}`, "data-testid": "change-preview" })), h("p", { class: "muted small" }, `${blob.type}, ${bytes(blob.size)}`));
        })
        .catch(failed);
    } else if (e.type === "file" || e.kind === "deleted") {
      api
        .diff([path], ctl.signal)
        .then(({ text, cut }) => {
          const d = parseDiff(text, MAX_DIFF_LINES);
          if (d.hunks === 0) return show(h("p", { class: "summary-line", "data-testid": "change-oneline" }, text.trim() ? text.trim().split("\n").slice(-1)[0] : summary(e)));
          const tooLong = cut || d.cut ? h("p", { class: "hint", "data-testid": "diff-cut" }, `The diff is longer than the screen shows; airlock diff ${e.path} prints it whole.`) : null;
          show(layout === "split" ? split(d) : inline(d), tooLong);
        })
        .catch(failed);
    } else {
      show(h("p", { class: "summary-line", "data-testid": "change-oneline" }, summary(e)));
    }
  }

  function report(r: ApplyResult, force: boolean): void {
    const applied = r.applied?.length ?? 0;
    const conflicts = r.conflicts ?? [];
    const refused = r.refused ?? [];
    if (applied) toast(`Applied ${plural(applied, "change")}${force ? ", your versions kept in the checkpoint" : ""}`, "ok");
    fill(
      result,
      conflicts.length
        ? h(
            "div",
            { class: "callout callout-warn", "data-testid": "changes-conflicts" },
            h("strong", null, `${plural(conflicts.length, "change")} not applied: you changed ${conflicts.length === 1 ? "that file" : "those files"} on your computer after the sandbox read ${conflicts.length === 1 ? "it" : "them"}.`),
            h("p", null, "They wait in the list. Open one to compare, then Apply anyway keeps your version in the checkpoint."),
            h("ul", { class: "plain" }, conflicts.slice(0, 20).map((p) => h("li", null, h("code", null, p)))),
          )
        : null,
      refused.length
        ? h(
            "div",
            { class: "callout callout-bad", "data-testid": "changes-refused" },
            h("strong", null, `${plural(refused.length, "change")} refused: Airlock will not put ${refused.length === 1 ? "it" : "them"} in your folder.`),
            h("ul", { class: "plain" }, refused.slice(0, 20).map((x) => h("li", null, h("code", null, x.path), " — ", x.reason))),
          )
        : null,
    );
  }

  async function apply(paths: string[], force: boolean, btn: HTMLButtonElement): Promise<void> {
    if (paths.length === 0) return;
    let r: ApplyResult | undefined;
    const ok = await busy(btn, async () => (r = await api.applyChanges(paths, force)), listErr);
    if (ok && r) {
      for (const p of r.applied ?? []) selected.delete(p);
      report(r, force);
    }
    await Promise.all([store.refreshChanges(), loadCheckpoints()]);
    if (focused) openChange(focused);
  }

  async function discard(paths: string[], btn: HTMLButtonElement): Promise<void> {
    if (paths.length === 0) return;
    const names = paths.slice(0, 5).map((p) => h("li", null, h("code", null, p)));
    const yes = await confirmDialog(
      paths.length === 1 ? "Discard this change?" : `Discard ${plural(paths.length, "change")}?`,
      [
        h("p", null, "What the sandbox did to ", paths.length === 1 ? "this file" : "these files", " is thrown away. Your folder stays as it is. This cannot be undone."),
        h("ul", { class: "plain" }, names, paths.length > 5 ? h("li", { class: "muted" }, `and ${(paths.length - 5).toLocaleString()} more`) : null),
      ],
      paths.length === 1 ? "Discard" : `Discard ${plural(paths.length, "change")}`,
    );
    if (!yes) return;
    const ok = await busy(btn, async () => {
      const r = await api.discardChanges(paths);
      const n = r.discarded?.length ?? 0;
      for (const p of r.discarded ?? []) selected.delete(p);
      toast(`Discarded ${plural(n, "change")}`, "ok");
    }, listErr);
    if (ok) fill(result);
    await store.refreshChanges();
  }

  async function loadCheckpoints(): Promise<void> {
    try {
      const r = await api.checkpoints();
      checkpoints = r.checkpoints ?? [];
      usage = r.usage;
      cpErr.textContent = "";
    } catch (e) {
      cpErr.textContent = `Could not read the checkpoints: ${message(e)}`;
    }
    renderCheckpoints();
  }

  async function undo(cp: Checkpoint, btn: HTMLButtonElement): Promise<void> {
    const n = cp.paths?.length ?? 0;
    const yes = await confirmDialog(
      "Undo this checkpoint?",
      h("p", null, `The ${plural(n, "file")} it changed go back to how they were before ${clock(cp.time)}: their content, permissions and dates. What you changed in ${n === 1 ? "it" : "them"} since is replaced.`),
      "Undo",
    );
    if (!yes) return;
    const ok = await busy(btn, async () => await api.undo(cp.id), cpErr);
    if (ok) toast(`Undone: ${cp.summary}`, "ok");
    await Promise.all([loadCheckpoints(), store.refreshChanges()]);
  }

  function renderCheckpoints(): void {
    const u = usage ?? store.changes?.usage;
    if (u && u.limit_bytes > 0) {
      const used = u.pending_bytes + u.checkpoint_bytes;
      const pct = Math.min(100, Math.round((used / u.limit_bytes) * 100));
      fill(
        usageLine,
        h("div", { class: "progress", role: "progressbar", "aria-label": "Space used", "aria-valuemin": "0", "aria-valuemax": "100", "aria-valuenow": String(pct) }, h("div", { class: "progress-bar", style: `width:${pct}%` })),
        h("p", { class: "muted small" }, `${bytes(used)} of ${bytes(u.limit_bytes)} used: ${bytes(u.checkpoint_bytes)} by checkpoints, ${bytes(u.pending_bytes)} by changes waiting. The oldest checkpoints go first when space runs out; waiting changes never do.`),
      );
    } else fill(usageLine);
    const list = [...checkpoints].sort((a, b) => (a.time < b.time ? 1 : a.time > b.time ? -1 : 0));
    fill(
      cpList,
      list.length === 0
        ? h("li", { class: "empty" }, "Each time changes are applied, a checkpoint keeps what they replaced, so you can undo it.")
        : list.map((cp) => {
            const b: HTMLButtonElement = button("Undo", { icon: "undo", testid: "checkpoint-undo", title: `Put back what this checkpoint replaced`, onClick: () => void undo(cp, b) });
            return h(
              "li",
              { class: "checkpoint", "data-testid": "checkpoint", "data-id": cp.id, "data-undone": cp.undone ? "true" : "false" },
              h("div", { class: "cp-text" }, h("strong", null, cp.summary || plural(cp.paths?.length ?? 0, "file")), h("div", { class: "muted small" }, `${clock(cp.time)} · ${ago(cp.time)} · keeps ${bytes(cp.bytes)}`)),
              cp.undone ? badge("Undone", "muted", "checkpoint-undone") : b,
            );
          }),
    );
  }

  const el = h(
    "div",
    { class: "page page-wide", "data-testid": "screen-changes" },
    header("Changes", "What tasks changed in your folder. Apply what you want to keep; every application can be undone."),
    card("How tasks change this folder", modeSeg, modeAbout, modeErr),
    h(
      "div",
      { class: "changes-split" },
      h(
        "section",
        { class: "card change-col" },
        h("div", { class: "change-tools" }, h("label", { class: "check" }, selectAll, " All"), count),
        h("div", { class: "row change-actions" }, applySel, applyAll, discardSel, discardAll),
        listErr,
        result,
        h("div", { class: "change-scroll" }, list, more, empty),
      ),
      h("section", { class: "card detail-col", "aria-label": "The change" }, noDetail, detail),
    ),
    card("Checkpoints", usageLine, cpList, cpErr),
  );

  renderMode();
  renderList();
  renderCheckpoints();
  return {
    id: "changes",
    title: "Changes",
    icon: "changes",
    el,
    update: (t) => {
      if (t === "status") {
        renderMode();
        if ((store.session?.workspace || store.settings?.workspace || "") !== listedFor) renderList();
      }
      if (t === "changes") {
        renderMode();
        renderList();
        // Auto mode applies on its own: its checkpoints show up too.
        if (!el.hidden) void loadCheckpoints();
      }
    },
    shown: () => {
      void store.refreshChanges();
      void loadCheckpoints();
    },
  };
}
