// Settings → Agents without a VM: a real `airlock serve --http --no-boot`
// whose HOME is a fake one holding Cursor's and VS Code's folders. The page
// lists the agents found, connects one, and its file changes on disk: the
// entry added, the rest of the file (another server, comments) kept, a
// backup beside it; disconnecting gives the file back as it was.

import assert from "node:assert/strict";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { browser, screenshot, startServe } from "./harness.mjs";

let serve, ctx, page, home, cursorFile, vscodeFile;
const pageErrors = [];

const CURSOR = `{
  "mcpServers": {
    "playwright": { "command": "npx", "args": ["-y", "@playwright/mcp@latest"] }
  },
  "someFutureSetting": [1, 2.50]
}
`;
const VSCODE = `// my servers
{
\t"servers": {
\t\t"memory": { "type": "stdio", "command": "npx", "args": ["-y", "@modelcontextprotocol/server-memory"] }, // pinned
\t},
}
`;

before(async () => {
  home = mkdtempSync(join(tmpdir(), "airlock-agents-home-"));
  mkdirSync(join(home, ".cursor"));
  cursorFile = join(home, ".cursor", "mcp.json");
  writeFileSync(cursorFile, CURSOR, { mode: 0o640 });
  serve = await startServe({}, { HOME: home, PATH: "/usr/bin:/bin", CODEX_HOME: "", CLAUDE_CONFIG_DIR: "" });
  // VS Code's user folder is under XDG_CONFIG_HOME, which serve has its own of.
  mkdirSync(join(serve.dirs.XDG_CONFIG_HOME, "Code", "User"), { recursive: true });
  vscodeFile = join(serve.dirs.XDG_CONFIG_HOME, "Code", "User", "mcp.json");
  writeFileSync(vscodeFile, VSCODE);
  ctx = await browser(serve.tmp);
  page = await ctx.newPage();
  page.on("pageerror", (e) => pageErrors.push(e.message));
});

after(async () => {
  await ctx?.close();
  if (serve) {
    const res = await serve.stop();
    serve.cleanup();
    assert.equal(res.code, 0, `serve exited ${res.code}`);
  }
  if (home) rmSync(home, { recursive: true, force: true });
  assert.deepEqual(pageErrors, []);
});

function entry(name) {
  return page.locator(`[data-testid=agent-entry][data-name=${name}]`);
}

test("the agents found are listed, the others named", async () => {
  await page.goto(serve.url + "#/settings");
  await entry("cursor").waitFor();
  await entry("vscode").waitFor();
  assert.equal(await entry("codex").count(), 0);
  assert.equal(await entry("cursor").getAttribute("data-connected"), "false");
  const missing = await page.getByTestId("agent-missing").textContent();
  assert.match(missing, /Codex/);
  assert.match(missing, /Claude Desktop/);
  assert.match(await entry("cursor").textContent(), /\.cursor\/mcp\.json/);
});

test("Connect adds the entry to the agent's file and keeps the rest", async () => {
  await entry("cursor").getByTestId("agent-toggle").click();
  await page.locator("[data-testid=agent-entry][data-name=cursor][data-connected=true]").waitFor();
  const doc = JSON.parse(readFileSync(cursorFile, "utf8"));
  assert.equal(doc.mcpServers.airlock.command.endsWith("/airlock"), true, JSON.stringify(doc));
  assert.deepEqual(doc.mcpServers.airlock.args, ["mcp"]);
  assert.deepEqual(doc.mcpServers.playwright, { command: "npx", args: ["-y", "@playwright/mcp@latest"] });
  assert.deepEqual(doc.someFutureSetting, [1, 2.5]);
  assert.equal(readFileSync(cursorFile + ".airlock-backup", "utf8"), CURSOR);
  assert.equal(statSync(cursorFile).mode & 0o777, 0o640);
  await screenshot(page, "settings-agents");
});

test("a JSON file with comments keeps them, and Disconnect gives it back", async () => {
  await entry("vscode").getByTestId("agent-toggle").click();
  await page.locator("[data-testid=agent-entry][data-name=vscode][data-connected=true]").waitFor();
  const text = readFileSync(vscodeFile, "utf8");
  assert.match(text, /^\/\/ my servers\n/);
  assert.match(text, /\/\/ pinned/);
  assert.match(text, /"airlock": \{\n\t\t\t"type": "stdio",/);
  await entry("vscode").getByTestId("agent-toggle").click();
  await page.locator("[data-testid=agent-entry][data-name=vscode][data-connected=false]").waitFor();
  assert.equal(readFileSync(vscodeFile, "utf8"), VSCODE);
  assert.equal(existsSync(vscodeFile + ".airlock-backup"), true);
});

test("a file that does not parse is shown, and left alone", async () => {
  writeFileSync(cursorFile, "{ not json");
  await page.reload();
  await entry("cursor").waitFor();
  assert.match(await entry("cursor").textContent(), /not valid JSON/);
  assert.equal(await entry("cursor").getByTestId("agent-toggle").isDisabled(), true);
  assert.equal(readFileSync(cursorFile, "utf8"), "{ not json");
});
