// Small building blocks shared by the screens.

import { ApiError } from "./api";
import { h, icon, type Child } from "./dom";
import type { Topic } from "./store";

export interface View {
  id: string;
  title: string;
  icon: Parameters<typeof icon>[0];
  el: HTMLElement;
  update(t: Topic): void;
  /** shown runs each time the screen becomes visible. */
  shown?(): void;
}

export type Tone = "ok" | "bad" | "warn" | "busy" | "muted" | "info";

export function badge(text: string, tone: Tone, testid?: string): HTMLSpanElement {
  return h("span", { class: `badge badge-${tone}`, "data-testid": testid }, tone === "busy" ? h("span", { class: "spinner" }) : null, text);
}

type Variant = "primary" | "secondary" | "danger" | "ghost";

export function button(label: Child, opts: { variant?: Variant; icon?: Parameters<typeof icon>[0]; onClick?: (e: MouseEvent) => void; testid?: string; title?: string; type?: "button" | "submit" } = {}): HTMLButtonElement {
  return h(
    "button",
    {
      type: opts.type ?? "button",
      class: `btn btn-${opts.variant ?? "secondary"}`,
      onclick: opts.onClick,
      "data-testid": opts.testid,
      title: opts.title,
    },
    opts.icon ? icon(opts.icon, 16) : null,
    label,
  );
}

export function message(err: unknown): string {
  if (err instanceof ApiError) return err.message;
  if (err instanceof Error) return err.message;
  return String(err);
}

/**
 * busy disables btn while work runs, and shows a failure in errorEl (or as a
 * toast when there is none). It resolves to whether the work succeeded.
 */
export async function busy(btn: HTMLButtonElement | null, work: () => Promise<unknown>, errorEl?: HTMLElement): Promise<boolean> {
  if (btn) {
    btn.disabled = true;
    btn.classList.add("is-busy");
  }
  if (errorEl) errorEl.textContent = "";
  try {
    await work();
    return true;
  } catch (e) {
    if (errorEl) {
      errorEl.textContent = message(e);
    } else toast(message(e), "bad");
    return false;
  } finally {
    if (btn) {
      btn.disabled = false;
      btn.classList.remove("is-busy");
    }
  }
}

let toasts: HTMLElement | null = null;

export function toast(text: string, tone: Tone = "info"): void {
  if (!toasts) {
    toasts = h("div", { class: "toasts", role: "status", "aria-live": "polite" });
    document.body.appendChild(toasts);
  }
  const t = h("div", { class: `toast toast-${tone}` }, text);
  toasts.appendChild(t);
  setTimeout(() => t.classList.add("toast-out"), 4500);
  setTimeout(() => t.remove(), 5000);
}

export async function copy(text: string): Promise<void> {
  try {
    await navigator.clipboard.writeText(text);
    toast("Copied", "ok");
  } catch {
    toast("Copying is not allowed here; select the text instead", "warn");
  }
}

export function header(title: string, subtitle: string, ...extra: Child[]): HTMLElement {
  return h("header", { class: "page-head" }, h("div", null, h("h1", null, title), h("p", { class: "lead" }, subtitle)), h("div", { class: "page-actions" }, extra));
}

export function card(title: Child, ...body: Child[]): HTMLElement {
  return h("section", { class: "card" }, title ? h("h2", { class: "card-title" }, title) : null, body);
}

export function pathLine(path: string, testid?: string): HTMLElement {
  return h("div", { class: "path-line" }, h("code", { "data-testid": testid, title: path }, path || "—"), path ? button("Copy", { variant: "ghost", icon: "copy", onClick: () => void copy(path), title: "Copy this path" }) : null);
}

/**
 * confirmDialog asks before something that cannot be taken back, in a modal
 * <dialog> (Escape or Cancel says no). It resolves to the answer.
 */
export function confirmDialog(title: string, body: Child, ok: string, variant: Variant = "danger"): Promise<boolean> {
  return new Promise((resolve) => {
    const okBtn = button(ok, { variant, testid: "confirm-ok" });
    const cancelBtn = button("Cancel", { testid: "confirm-cancel" });
    const heading = h("h2", { class: "dialog-title", id: "confirm-title" }, title);
    const dlg = h(
      "dialog",
      { class: "dialog", "data-testid": "confirm-dialog", "aria-labelledby": "confirm-title" },
      heading,
      h("div", { class: "dialog-body" }, body),
      h("div", { class: "dialog-actions" }, cancelBtn, okBtn),
    );
    let answer = false;
    okBtn.addEventListener("click", () => ((answer = true), dlg.close()));
    cancelBtn.addEventListener("click", () => dlg.close());
    dlg.addEventListener("close", () => {
      dlg.remove();
      resolve(answer);
    });
    document.body.appendChild(dlg);
    dlg.showModal();
    cancelBtn.focus();
  });
}
