// Agents card of the Settings screen: a button per agent found on this
// computer (Claude Desktop, Claude Code, Codex, Cursor, VS Code) that adds
// Airlock's MCP server to that agent's own configuration file, or takes it
// out again (POST /v1/agents/NAME/connect|disconnect, what `airlock
// connect` does).

import { api, type AgentStatus } from "../api";
import { fill, h } from "../dom";
import { badge, busy, button, card, pathLine, toast } from "../ui";

export function agentsCard(): { el: HTMLElement; refresh: () => Promise<void> } {
  const list = h("ul", { class: "rules agents", "data-testid": "agent-list" });
  const err = h("p", { class: "field-error", role: "alert", "data-testid": "agent-error" });
  const missing = h("p", { class: "hint", "data-testid": "agent-missing" });

  function item(a: AgentStatus): HTMLElement {
    const btn = button(a.connected ? "Disconnect" : "Connect", {
      variant: a.connected ? undefined : "primary",
      testid: "agent-toggle",
      title: a.connected ? `Take Airlock out of ${a.title}` : `Let ${a.title} run commands in the sandbox`,
      onClick: () => void toggle(a, btn),
    });
    if (a.error) btn.disabled = true;
    return h(
      "li",
      { class: "rule agent", "data-testid": "agent-entry", "data-name": a.name, "data-connected": String(a.connected) },
      h(
        "div",
        null,
        h("strong", null, a.title),
        " ",
        a.connected ? badge("connected", "ok") : a.other ? badge("runs another Airlock", "warn") : badge("not connected", "muted"),
        pathLine(a.path),
        a.error ? h("div", { class: "field-error small" }, a.error) : null,
      ),
      btn,
    );
  }

  async function refresh(): Promise<void> {
    try {
      const all = await api.agents();
      const found = all.filter((a) => a.found);
      err.textContent = "";
      fill(list, found.length ? found.map(item) : h("li", { class: "empty" }, "None of the agents Airlock knows is on this computer."));
      const others = all.filter((a) => !a.found).map((a) => a.title);
      missing.textContent = others.length ? `Not found on this computer: ${others.join(", ")}.` : "";
    } catch (e) {
      err.textContent = (e as Error).message;
    }
  }

  async function toggle(a: AgentStatus, btn: HTMLButtonElement): Promise<void> {
    await busy(
      btn,
      async () => {
        const res = await api.connectAgent(a.name, !a.connected);
        if (res.changed) toast(`${a.connected ? "Disconnected" : "Connected"} ${a.title}. Restart it to use the change.`, "ok");
        await refresh();
      },
      err,
    );
  }

  const el = card(
    "Agents",
    h(
      "p",
      { class: "hint" },
      "Connect an agent and it can run commands in this sandbox through Airlock's MCP server (",
      h("code", null, "airlock mcp"),
      "). Airlock changes only its own entry in the agent's settings file and keeps a copy of the file as it was.",
    ),
    err,
    list,
    missing,
  );
  el.dataset.testid = "agents-card";
  void refresh();
  return { el, refresh };
}
