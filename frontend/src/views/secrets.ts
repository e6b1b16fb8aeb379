// Secrets card of the Network screen: credentials the gate adds on the way
// out. A value typed here goes to the service once, in the request that
// sets it; the UI never gets it back and clears the field at once.

import { api, type SecretInfo } from "../api";
import { fill, h, icon } from "../dom";
import { badge, busy, button, card } from "../ui";

export function secretsCard(): { el: HTMLElement; refresh: () => Promise<void> } {
  const list = h("ul", { class: "rules secrets", "data-testid": "secret-list" });
  const err = h("p", { class: "field-error", role: "alert", "data-testid": "secret-error" });
  const note = h("p", { class: "hint", "data-testid": "secret-note" });
  const input = (attrs: Record<string, string>) =>
    h("input", { type: "text", class: "input mono", spellcheck: "false", autocomplete: "off", ...attrs }) as HTMLInputElement;
  const name = input({ placeholder: "GITHUB_TOKEN", "aria-label": "Secret name", "data-testid": "secret-name" });
  const hosts = input({ placeholder: "api.github.com *.example.com", "aria-label": "Hosts it may be sent to", "data-testid": "secret-hosts" });
  const header = input({ placeholder: "Authorization: Bearer {}  (optional)", "aria-label": "Header template", "data-testid": "secret-header" });
  const value = input({ type: "password", placeholder: "value", "aria-label": "Secret value", "data-testid": "secret-value", autocomplete: "new-password" });
  const add = button("Add secret", { variant: "primary", icon: "lock", testid: "secret-add", type: "submit" });

  function items(secrets: SecretInfo[]): HTMLElement[] {
    if (secrets.length === 0) return [h("li", { class: "empty" }, "No secrets. Tasks get no credentials.")];
    return secrets.map((s) => {
      const rm: HTMLButtonElement = h(
        "button",
        { type: "button", class: "icon-btn", title: `Remove ${s.name}`, "aria-label": `Remove ${s.name}`, "data-testid": "secret-remove", onclick: () => void remove(s.name, rm) },
        icon("trash", 15),
      );
      return h(
        "li",
        { class: "rule secret", "data-testid": "secret-entry", "data-name": s.name },
        h(
          "div",
          null,
          h("code", null, s.name),
          " ",
          s.available ? badge("ready", "ok") : badge("no value", "warn"),
          h("div", { class: "muted small" }, "to ", (s.hosts ?? []).join(", "), " · ", s.header ? s.header : "replaces its placeholder", " · from ", s.source),
          s.problem ? h("div", { class: "muted small" }, s.problem) : null,
        ),
        rm,
      );
    });
  }

  async function refresh(): Promise<void> {
    try {
      fill(list, items(await api.secrets()));
    } catch (e) {
      err.textContent = (e as Error).message;
    }
  }

  async function remove(n: string, btn: HTMLButtonElement): Promise<void> {
    await busy(btn, async () => {
      await api.removeSecret(n);
      await refresh();
    }, err);
  }

  async function submit(): Promise<void> {
    note.textContent = "";
    const v = value.value;
    // The value leaves the field before anything else can happen.
    value.value = "";
    const ok = await busy(
      add,
      async () => {
        const info = await api.setSecret({
          name: name.value.trim(),
          hosts: hosts.value.split(/[\s,]+/).filter(Boolean),
          header: header.value.trim() || undefined,
          value: v,
        });
        if (info.note) note.textContent = info.note;
        await refresh();
      },
      err,
    );
    if (ok) {
      name.value = "";
      hosts.value = "";
      header.value = "";
    }
  }

  const form = h(
    "form",
    {
      class: "secret-form",
      "data-testid": "secret-form",
      onsubmit: (e: SubmitEvent) => {
        e.preventDefault();
        void submit();
      },
    },
    h("div", { class: "row" }, name, hosts),
    h("div", { class: "row" }, header, value, add),
  );
  const el = card(
    "Secrets",
    h(
      "p",
      { class: "hint" },
      "API keys and tokens stay on this computer. A task run with ",
      h("code", null, "--secret NAME"),
      " sees only a placeholder; Airlock puts the real value in on the way out, and only to the hosts you list here. The value is stored in your system keychain and never shown again.",
    ),
    form,
    err,
    note,
    list,
  );
  void refresh();
  return { el, refresh };
}
