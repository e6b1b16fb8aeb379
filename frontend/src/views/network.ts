// Network: which sites tasks may reach, presets, and the live decision log.

import { api, type Decision } from "../api";
import { fill, h, icon } from "../dom";
import { bytes, clock, reason, target } from "../format";
import { store } from "../store";
import { badge, busy, button, card, header, type View } from "../ui";
import { secretsCard } from "./secrets";

export interface Preset {
  id: string;
  name: string;
  about: string;
  hosts: string[];
}

export const PRESETS: Preset[] = [
  { id: "python", name: "Python packages", about: "pip install from PyPI", hosts: ["pypi.org", "files.pythonhosted.org"] },
  { id: "npm", name: "npm packages", about: "npm install from the npm registry", hosts: ["registry.npmjs.org"] },
  { id: "github", name: "GitHub", about: "git clone, release downloads, raw files", hosts: ["github.com", "*.github.com", "*.githubusercontent.com"] },
  { id: "ai", name: "AI APIs", about: "Anthropic, OpenAI and Google Gemini", hosts: ["api.anthropic.com", "api.openai.com", "generativelanguage.googleapis.com"] },
];

type Filter = "all" | "allow" | "deny";

export function networkView(): View {
  const presets = h("div", { class: "presets", "data-testid": "presets" });
  const allowList = h("ul", { class: "rules", "data-testid": "allow-list" });
  const denyList = h("ul", { class: "rules", "data-testid": "deny-list" });
  const pinned = h("div");
  const pattern = h("input", {
    type: "text",
    class: "input mono",
    placeholder: "example.com or *.example.com",
    "aria-label": "Site",
    "data-testid": "rule-pattern",
    spellcheck: "false",
    autocomplete: "off",
  });
  const ruleErr = h("p", { class: "field-error", role: "alert", "data-testid": "rule-error" });
  const allowBtn = button("Allow", { variant: "primary", icon: "check", testid: "rule-allow", type: "submit" });
  const denyBtn = button("Block", { variant: "danger", icon: "cross", testid: "rule-deny", onClick: () => void addRule("deny") });

  let filter: Filter = "all";
  let rulesKey = "";
  const search = h("input", { type: "search", class: "input", placeholder: "Filter by site, task or reason", "aria-label": "Filter the log", "data-testid": "log-search" });
  const seg = h("div", { class: "segmented", role: "group", "aria-label": "Show" });
  const segButtons = (["all", "allow", "deny"] as Filter[]).map((f) =>
    h("button", { type: "button", "data-filter": f, "data-testid": `log-filter-${f}`, onclick: () => ((filter = f), renderLog()) }, f === "all" ? "All" : f === "allow" ? "Allowed" : "Blocked"),
  );
  seg.append(...segButtons);
  const logBody = h("tbody", { "data-testid": "egress-log" });
  const logCount = h("span", { class: "muted" });

  async function addRule(action: "allow" | "deny", value = pattern.value): Promise<void> {
    const p = value.trim();
    if (!p) {
      ruleErr.textContent = "Type a site name such as example.com, or *.example.com for all its subdomains.";
      pattern.focus();
      return;
    }
    const ok = await busy(action === "allow" ? allowBtn : denyBtn, async () => store.setSettings(await api.rule(action, p)), ruleErr);
    if (ok && value === pattern.value) pattern.value = "";
    if (!ok) pattern.classList.add("input-error");
  }

  async function removeRule(p: string, btn: HTMLButtonElement): Promise<void> {
    await busy(btn, async () => store.setSettings(await api.rule("remove", p)));
  }

  function ruleItems(entries: string[], kind: "allow" | "deny"): HTMLElement[] {
    if (entries.length === 0) {
      return [h("li", { class: "empty" }, kind === "allow" ? "Nothing allowed: tasks cannot reach the internet." : "Nothing blocked beyond the default.")];
    }
    return entries.map((e) => {
      const rm: HTMLButtonElement = h("button", { type: "button", class: "icon-btn", title: `Remove ${e}`, "aria-label": `Remove ${e}`, "data-testid": "rule-remove", onclick: () => void removeRule(e, rm) }, icon("trash", 15));
      return h("li", { class: `rule rule-${kind}`, "data-testid": `${kind}-entry`, "data-pattern": e }, h("code", null, e), rm);
    });
  }

  function renderRules(): void {
    const st = store.settings;
    if (!st) return;
    const key = JSON.stringify([st.allow, st.deny, st.map_hosts]);
    if (key === rulesKey) return;
    rulesKey = key;
    fill(allowList, ruleItems(st.allow ?? [], "allow"));
    fill(denyList, ruleItems(st.deny ?? [], "deny"));
    fill(
      pinned,
      st.map_hosts?.length
        ? h("p", { class: "hint" }, "Pinned in the settings file (where these names go; the allow rules say which ports are open): ", (st.map_hosts ?? []).map((m) => h("code", { class: "chip" }, m)))
        : null,
    );
    fill(
      presets,
      PRESETS.map((p) => {
        const on = p.hosts.every((x) => st.allow?.includes(x));
        const b = button(on ? "Allowed" : "Allow", {
          variant: on ? "secondary" : "primary",
          icon: on ? "check" : undefined,
          testid: `preset-${p.id}`,
          title: on ? `Remove ${p.hosts.join(", ")} from the allow list` : `Allow ${p.hosts.join(", ")}`,
          onClick: () =>
            void busy(b, async () => {
              for (const x of p.hosts) {
                if (on) store.setSettings(await api.rule("remove", x));
                else if (!store.settings?.allow?.includes(x)) store.setSettings(await api.rule("allow", x));
              }
            }),
        });
        return h(
          "div",
          { class: `preset${on ? " preset-on" : ""}`, "data-preset": p.id },
          h("div", { class: "preset-head" }, h("strong", null, p.name), b),
          h("p", { class: "muted small" }, p.about),
          h("div", { class: "chips" }, p.hosts.map((x) => h("code", { class: "chip" }, x))),
        );
      }),
    );
  }

  function matches(d: Decision, q: string): boolean {
    if (filter !== "all" && d.decision !== filter) return false;
    if (!q) return true;
    return [d.host, d.addr, d.task, d.reason, reason(d), d.rule, d.detail, d.protocol, String(d.port ?? "")].some((x) => x && x.toLowerCase().includes(q));
  }

  function renderLog(): void {
    const q = search.value.trim().toLowerCase();
    const all = store.decisions;
    const rows = all.filter((d) => matches(d, q)).slice(-500).reverse();
    logCount.textContent = all.length ? `${rows.length} of ${all.length}` : "";
    for (const b of segButtons) {
      b.classList.toggle("on", b.dataset.filter === filter);
      b.setAttribute("aria-pressed", String(b.dataset.filter === filter));
    }
    if (rows.length === 0) {
      fill(logBody, h("tr", null, h("td", { colspan: "6", class: "empty" }, all.length ? "Nothing matches this filter." : "No connections yet. When a task reaches out, it shows up here.")));
      return;
    }
    const allowed = store.settings?.allow ?? [];
    fill(
      logBody,
      rows.map((d) => {
        const ok = d.decision === "allow";
        const quick =
          !ok && d.host && !allowed.includes(d.host)
            ? h("button", { type: "button", class: "link", "data-testid": "log-allow", title: `Add ${d.host} to the allow list`, onclick: () => void addRule("allow", d.host!) }, "Allow")
            : null;
        return h(
          "tr",
          { "data-testid": "log-row", "data-decision": d.decision, "data-host": d.host ?? "" },
          h("td", { class: "mono muted nowrap" }, clock(d.time)),
          h("td", null, badge(ok ? "Allowed" : "Blocked", ok ? "ok" : "bad")),
          h("td", { class: "mono" }, target(d.host, d.port, d.protocol)),
          h(
            "td",
            { title: d.detail ?? d.rule ?? "" },
            reason(d),
            d.rule && ok ? h("span", { class: "muted small" }, ` · ${d.rule}`) : null,
            d.secrets?.length ? h("span", { class: "muted small", "data-testid": "log-secrets" }, ` · added ${d.secrets.join(", ")}`) : null,
            d.repeated ? h("span", { class: "muted small", "data-testid": "log-repeated" }, ` · ×${d.repeated} more`) : null,
          ),
          h("td", { class: "mono muted small" }, d.task ?? ""),
          h("td", { class: "muted small nowrap" }, ok ? `↓ ${bytes(d.bytes_down)} ↑ ${bytes(d.bytes_up)}` : quick),
        );
      }),
    );
  }

  search.addEventListener("input", renderLog);
  pattern.addEventListener("input", () => {
    ruleErr.textContent = "";
    pattern.classList.remove("input-error");
  });

  const secrets = secretsCard();
  const el = h(
    "div",
    { class: "page page-wide", "data-testid": "screen-network" },
    header("Network", "Tasks reach only the sites you allow. Everything else is blocked — or, while this window is open, you are asked."),
    card("Quick allow", presets),
    h(
      "div",
      { class: "grid-2" },
      card(
        "Your rules",
        h(
          "form",
          {
            class: "row",
            onsubmit: (e: SubmitEvent) => {
              e.preventDefault();
              void addRule("allow");
            },
          },
          pattern,
          allowBtn,
          denyBtn,
        ),
        ruleErr,
        h("p", { class: "hint" }, "Use ", h("code", null, "*.example.com"), " for every subdomain, and add ", h("code", null, ":443"), " to allow a single port. Blocking wins over allowing."),
        h("div", { class: "rules-cols" }, h("div", null, h("h3", null, icon("check", 15), " Allowed"), allowList), h("div", null, h("h3", null, icon("cross", 15), " Blocked"), denyList)),
        pinned,
      ),
      card(
        "How it works",
        h(
          "ul",
          { class: "explain" },
          h("li", null, icon("shield", 16), h("span", null, "The sandbox has no network of its own. Every connection goes through Airlock on this computer, which checks it against your rules.")),
          h("li", null, icon("eye", 16), h("span", null, "Every attempt is listed below: which task, which site, and why it was allowed or blocked.")),
          h("li", null, icon("lock", 16), h("span", null, "Addresses inside your home or office network are always blocked unless you allow that exact address.")),
        ),
      ),
    ),
    secrets.el,
    card(h("span", null, "Activity ", logCount), h("div", { class: "row log-tools" }, seg, search), h("div", { class: "table-wrap" }, h("table", { class: "log" }, h("thead", null, h("tr", null, ["Time", "", "Site", "Why", "Task", ""].map((c) => h("th", null, c)))), logBody))),
  );
  renderRules();
  renderLog();
  return {
    id: "network",
    title: "Network",
    icon: "network",
    el,
    shown: () => void secrets.refresh(),
    update: (t) => {
      if (t === "status") {
        renderRules();
        renderLog();
      } else if (t === "egress") renderLog();
    },
  };
}
