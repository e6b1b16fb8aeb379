// Browser tests: the web UI against a real `airlock serve --http` and a real
// VM, driven in Debian's Chromium. The tests run in order and share one
// page, the way a person would go through the screens; each screen is
// saved to artifacts/ as a screenshot.

import assert from "node:assert/strict";
import { chownSync, existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { browser, fileServer, leftovers, screenshot, startServe, workspaceDir } from "./harness.mjs";

const BOOT_TIMEOUT = 150_000;

let serve, files, ctx, page, ws;
const pageErrors = [];

before(async () => {
  files = await fileServer();
  serve = await startServe({ map_hosts: ["files.test=127.0.0.1"] });
  ws = workspaceDir(serve.tmp);
  ctx = await browser(serve.tmp);
  page = await ctx.newPage();
  page.on("pageerror", (e) => pageErrors.push(e.message));
  await page.goto(serve.url);
  await page.getByTestId("connection").getByText("Stopped").waitFor();
});

after(async () => {
  await ctx?.close().catch(() => {});
  let stopped;
  try {
    stopped = await serve?.stop();
  } finally {
    await files?.close();
  }
  if (serve) {
    // The VM and its helpers go with the service: nothing may mention our folders now.
    const left = leftovers(serve.tmp);
    serve.cleanup();
    assert.deepEqual(left, [], "processes left behind after airlock serve stopped");
    assert.equal(stopped?.code, 0, `airlock serve exit: ${JSON.stringify(stopped)}\n${serve.stderr()}`);
  }
});

async function go(screen) {
  await page.getByTestId(`nav-${screen}`).click();
  await page.getByTestId(`screen-${screen}`).waitFor({ state: "visible" });
}

async function runTask(line) {
  await go("tasks");
  // The task selected before (if any) stays selected until the new one is
  // listed: waiting for "a selected task" alone could return the old one.
  const before = await page.evaluate(
    () => document.querySelector('[data-testid="task-item"].selected')?.getAttribute("data-task") ?? null,
  );
  await page.getByTestId("task-command").fill(line);
  await page.getByTestId("task-run").click();
  // The new task is selected and its output followed.
  const id = await (
    await page.waitForFunction((prev) => {
      const id = document.querySelector('[data-testid="task-item"].selected')?.getAttribute("data-task") ?? null;
      return id !== null && id !== prev ? id : null;
    }, before)
  ).jsonValue();
  await page.waitForFunction((id) => document.querySelector('[data-testid="task-output"]')?.getAttribute("data-task") === id, id);
  return page.locator(`[data-testid="task-item"][data-task="${id}"]`);
}

async function terminalText() {
  return page.locator('[data-testid="task-output"] .xterm-rows').innerText();
}

async function waitForOutput(text, timeout = 60_000) {
  await page.waitForFunction(
    (t) => document.querySelector('[data-testid="task-output"] .xterm-rows')?.textContent.includes(t),
    text,
    { timeout },
  );
}

test("the token is taken out of the address bar and the page loads without errors", async () => {
  assert.ok(!page.url().includes("token="), page.url());
  await page.getByTestId("screen-workspace").waitFor();
  assert.match(await page.title(), /Airlock/);
});

test("workspace: a file is refused inline without losing the input, then a folder is shared", async () => {
  await go("workspace");
  const input = page.getByTestId("ws-path");
  const notFolder = `${serve.tmp}/not-a-folder.txt`;
  await input.fill(notFolder);
  await page.getByTestId("ws-share").click();
  const err = page.getByTestId("ws-error");
  await err.waitFor({ state: "visible" });
  assert.ok((await err.innerText()).length > 0);
  assert.equal(await input.inputValue(), notFolder, "the typed path is kept after an error");
  await screenshot(page, "01a-workspace-refused");

  await input.fill(ws);
  await page.getByTestId("ws-share").click();
  await page.getByTestId("ws-current").filter({ hasText: ws }).waitFor();
  assert.equal(await page.getByTestId("ws-error").innerText(), "");
  assert.equal(await page.getByTestId("ws-mode").innerText(), "Read and write");
  assert.match(await page.getByTestId("ws-statement").innerText(), /reports/);

  // Read only, and back (the machine is not running yet, so this is cheap).
  await page.getByTestId("screen-workspace").locator(".switch").click();
  await page.getByTestId("ws-mode").filter({ hasText: "Read only" }).waitFor();
  assert.match(await page.getByTestId("ws-statement").innerText(), /cannot change/);
  await page.getByTestId("screen-workspace").locator(".switch").click();
  await page.getByTestId("ws-mode").filter({ hasText: "Read and write" }).waitFor();

  // Another folder, then back to the first from the recent list.
  const other = `${serve.tmp}/archive`;
  mkdirSync(other);
  await input.fill(other);
  await page.getByTestId("ws-share").click();
  await page.getByTestId("ws-current").filter({ hasText: other }).waitFor();
  await page.getByTestId("ws-recent").getByTitle(`Share ${ws}`).click();
  await page.getByTestId("ws-current").filter({ hasText: ws }).waitFor();
  await page.getByTestId("ws-recent").getByTitle(`Share ${other}`).waitFor();
  await screenshot(page, "01-workspace");
});

test("changes: review mode is chosen for the folder before the machine starts", async () => {
  // A file for a task to delete later; the guest's task user owns the folder's files.
  for (const [name, text] of [
    ["old-draft.txt", "draft to keep\n"],
    ["plan.txt", "my plan\n"],
  ]) {
    writeFileSync(join(ws, name), text);
    if (process.getuid?.() === 0) chownSync(join(ws, name), 1000, 1000);
  }
  await go("changes");
  await page.getByTestId("changes-mode-review").click();
  await page.locator('[data-testid="changes-mode-review"][aria-pressed="true"]').waitFor();
  assert.match(await page.getByTestId("changes-mode-about").innerText(), /Nothing reaches your folder until you apply it/);
  await page.getByTestId("changes-empty").filter({ hasText: "No changes waiting" }).waitFor();
  const settingsFile = JSON.parse(readFileSync(`${serve.dirs.XDG_CONFIG_HOME}/airlock/settings.json`, "utf8"));
  assert.match(JSON.stringify(settingsFile), /"review"/, "settings.json keeps the mode");
});

test("machine: start from the UI, boot progress, then ready with CPUs and memory", { timeout: BOOT_TIMEOUT + 30_000 }, async () => {
  await go("machine");
  // Sharing a folder may already have started it.
  if (await page.getByTestId("vm-start").isEnabled()) await page.getByTestId("vm-start").click();
  const state = page.getByTestId("vm-state");
  await page.waitForFunction(() => ["starting", "running"].includes(document.querySelector('[data-testid="vm-state"]')?.getAttribute("data-state")));
  if ((await state.getAttribute("data-state")) === "starting") await screenshot(page, "02-machine-starting");
  await page.waitForFunction(() => document.querySelector('[data-testid="vm-state"]')?.getAttribute("data-state") === "running", null, { timeout: BOOT_TIMEOUT });
  assert.equal(await page.getByTestId("vm-cpus").innerText(), "2");
  assert.match(await page.getByTestId("vm-memory").innerText(), /GB|MB/);
  assert.match(await page.getByTestId("vm-console-log").innerText(), /console\.log$/);
  // The image card: minimal by default, so there is no disk to keep or reset.
  assert.equal(await page.getByTestId("vm-image").getAttribute("data-value"), "minimal");
  assert.equal(await page.getByTestId("vm-keep-disk").isDisabled(), true);
  assert.equal(await page.getByTestId("vm-reset-disk").isDisabled(), true);
  await screenshot(page, "03-machine");
});

test("tasks: a command's output appears live and it ends as done", async () => {
  const item = await runTask("echo hello-from-airlock; ls /workspace; id -u; echo to-stderr >&2");
  await waitForOutput("hello-from-airlock");
  await waitForOutput("q3-summary.md");
  await waitForOutput("to-stderr");
  await item.and(page.locator('[data-state="exited"]')).waitFor({ timeout: 30_000 });
  assert.match(await page.getByTestId("task-state").innerText(), /Done/);
  assert.match(await terminalText(), /1000/);
  await screenshot(page, "04-tasks");
});

test("tasks: the output is whole when the server cuts log streams short (desktop long polling)", async () => {
  const item = await runTask("for i in 1 2 3 4 5; do echo line-$i; sleep 0.2; done");
  await waitForOutput("line-5");
  await item.and(page.locator('[data-state="exited"]')).waitFor({ timeout: 30_000 });
  // Read it again through a server that ends the first follow after one
  // record with X-Airlock-Stream: poll, as the desktop window's does.
  let follows = 0;
  const pattern = /\/v1\/tasks\/[a-z2-7]+\/log\?.*follow=1/;
  await page.route(pattern, async (route) => {
    if (follows++ > 0) return route.continue();
    const res = await route.fetch();
    const first = (await res.text()).split("\n")[0] + "\n";
    await route.fulfill({ status: 200, headers: { "Content-Type": "application/x-ndjson", "X-Airlock-Stream": "poll" }, body: first });
  });
  try {
    await item.click();
    await waitForOutput("line-5");
    assert.ok(follows >= 2, `followed ${follows} times`);
    const text = await terminalText();
    for (let i = 1; i <= 5; i++) assert.equal(text.split(`line-${i}`).length - 1, 1, `line-${i} once in:\n${text}`);
  } finally {
    await page.unroute(pattern);
  }
});

test("tasks: a long task is cancelled", async () => {
  const item = await runTask("echo started; sleep 300");
  await waitForOutput("started");
  await page.getByTestId("task-cancel").click();
  await item.and(page.locator('[data-state="killed"]')).waitFor({ timeout: 20_000 });
  assert.match(await page.getByTestId("task-state").innerText(), /Cancelled/);
  await screenshot(page, "05-tasks-cancelled");
});

test("network: a bad pattern is refused inline; allow and block rules show an allowed and a blocked request", async () => {
  await go("network");
  const pattern = page.getByTestId("rule-pattern");
  await pattern.fill("*.com");
  await page.getByTestId("rule-allow").click();
  await page.getByTestId("rule-error").waitFor({ state: "visible" });
  assert.equal(await pattern.inputValue(), "*.com", "the typed pattern is kept after an error");

  await pattern.fill("files.test");
  await page.getByTestId("rule-allow").click();
  await page.locator('[data-testid="allow-entry"][data-pattern="files.test"]').waitFor();
  await pattern.fill("blocked.test");
  await page.getByTestId("rule-deny").click();
  await page.locator('[data-testid="deny-entry"][data-pattern="blocked.test"]').waitFor();
  await page.getByTestId("preset-python").click();
  await page.locator('[data-testid="allow-entry"][data-pattern="files.pythonhosted.org"]').waitFor();

  const p = files.port;
  const item = await runTask(`wget -q -O- http://files.test:${p}/report.csv; wget -q -O- http://blocked.test:${p}/ || echo blocked-as-expected`);
  await waitForOutput("hello from files.test /report.csv");
  await waitForOutput("blocked-as-expected");
  await item.and(page.locator('[data-state="exited"]')).waitFor({ timeout: 30_000 });

  await go("network");
  await page.locator('[data-testid="log-row"][data-decision="allow"][data-host="files.test"]').waitFor();
  await page.locator('[data-testid="log-row"][data-decision="deny"][data-host="blocked.test"]').waitFor();
  await page.getByTestId("log-filter-deny").click();
  assert.equal(await page.locator('[data-testid="log-row"][data-decision="allow"]').count(), 0);
  await page.getByTestId("log-filter-all").click();
  await page.getByTestId("log-search").fill("files.test");
  assert.equal(await page.locator('[data-testid="log-row"][data-host="blocked.test"]').count(), 0);
  await page.getByTestId("log-search").fill("");
  await screenshot(page, "06-network");
});

test("network: an unknown site asks; deny blocks it, always allow adds it to the allow list", { timeout: 90_000 }, async () => {
  const p = files.port;
  const item = await runTask(`wget -q -O- http://ask.test:${p}/ || echo refused-after-ask`);
  const ask = page.locator('[data-testid="ask"][data-host="ask.test"]');
  await ask.waitFor({ timeout: 30_000 });
  await screenshot(page, "07-ask");
  await ask.getByTestId("ask-deny").click();
  await ask.waitFor({ state: "detached" });
  await waitForOutput("refused-after-ask");
  await item.and(page.locator('[data-state="exited"]')).waitFor({ timeout: 30_000 });

  await runTask(`wget -q -O- http://always.test:${p}/ || echo always-done`);
  const ask2 = page.locator('[data-testid="ask"][data-host="always.test"]');
  await ask2.waitFor({ timeout: 30_000 });
  await ask2.getByTestId("ask-always").click();
  await ask2.waitFor({ state: "detached" });
  await waitForOutput("always-done");

  await go("network");
  await page.locator('[data-testid="log-row"][data-decision="deny"][data-host="ask.test"]').waitFor();
  await page.locator(`[data-testid="allow-entry"][data-pattern="always.test:${p}"]`).waitFor();
});

test("network: a secret is added with its value typed once, listed without it, and removed", async () => {
  await go("network");
  const value = `browser-secret-${Math.random().toString(36).slice(2)}-VALUE`;
  // A secret without hosts is refused inline.
  await page.getByTestId("secret-name").fill("BROWSER_TOKEN");
  await page.getByTestId("secret-value").fill(value);
  await page.getByTestId("secret-add").click();
  await page.getByTestId("secret-error").filter({ hasText: "host" }).waitFor();
  assert.equal(await page.getByTestId("secret-value").inputValue(), "", "the value leaves the field even when refused");

  await page.getByTestId("secret-hosts").fill("api.example.com *.example.org");
  await page.getByTestId("secret-header").fill("Authorization: Bearer {}");
  await page.getByTestId("secret-value").fill(value);
  assert.equal(await page.getByTestId("secret-value").getAttribute("type"), "password");
  await page.getByTestId("secret-add").click();
  const entry = page.locator('[data-testid="secret-entry"][data-name="BROWSER_TOKEN"]');
  await entry.waitFor();
  assert.match(await entry.innerText(), /api\.example\.com, \*\.example\.org/);
  assert.match(await entry.innerText(), /Authorization: Bearer \{\}/);
  assert.equal(await page.getByTestId("secret-value").inputValue(), "");
  // No keychain on the test machine: the service says it keeps the value in memory.
  await page.getByTestId("secret-note").filter({ hasText: "memory" }).waitFor();
  await screenshot(page, "07b-secrets");

  // The value is nowhere the UI can see, nor in the settings file.
  const html = await page.content();
  assert.ok(!html.includes(value), "the page shows the value");
  const listed = await page.evaluate(async () => (await fetch("/v1/secrets", { credentials: "same-origin" })).text());
  assert.ok(listed.includes("BROWSER_TOKEN") && !listed.includes(value), `GET /v1/secrets: ${listed}`);
  const settingsFile = readFileSync(`${serve.dirs.XDG_CONFIG_HOME}/airlock/settings.json`, "utf8");
  assert.ok(settingsFile.includes("BROWSER_TOKEN") && !settingsFile.includes(value), "settings.json holds the value");

  await entry.getByTestId("secret-remove").click();
  await entry.waitFor({ state: "detached" });
});

/** startTask starts a task through the API, as the page's own origin, without leaving the screen. */
async function startTask(shell) {
  const status = await page.evaluate(async (shell) => {
    const r = await fetch("/v1/tasks", { method: "POST", credentials: "same-origin", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ shell }) });
    return r.status;
  }, shell);
  assert.ok(status >= 200 && status < 300, `POST /v1/tasks: ${status}`);
}

/** changeRow is the Changes screen's row for a path (any characters). */
function changeRow(path) {
  return page.locator(`[data-testid="change"][data-path="${path.replace(/["\\]/g, "\\$&")}"]`);
}

test("changes: a deletion and an edit wait for review; apply one, undo it, discard the other", { timeout: 180_000 }, async () => {
  const q3 = join(ws, "q3-summary.md");
  const draft = join(ws, "old-draft.txt");
  const before = { bytes: readFileSync(q3), stat: statSync(q3) };
  const xss = "<img src=x onerror=window.__xss=1>.txt";
  const edited = "# Q3\nrevenue up 12%\ncosts flat\n";

  // The changes appear on the open screen as the task ends, without a reload.
  await go("changes");
  await startTask(`rm /workspace/old-draft.txt && printf '# Q3\\nrevenue up 12%%\\ncosts flat\\n' > /workspace/q3-summary.md && echo '<img src=y onerror=window.__xss=2>' > '/workspace/${xss}'`);
  await changeRow("q3-summary.md").waitFor({ timeout: 90_000 });
  await changeRow("old-draft.txt").waitFor({ timeout: 30_000 });
  await changeRow(xss).waitFor({ timeout: 30_000 });
  assert.equal(await changeRow("q3-summary.md").getAttribute("data-kind"), "modified");
  assert.equal(await changeRow("old-draft.txt").getAttribute("data-kind"), "deleted");
  assert.equal(await page.getByTestId("changes-badge").innerText(), "3");
  // Nothing reached the folder.
  assert.deepEqual(readFileSync(q3), before.bytes);
  assert.ok(existsSync(draft));

  // The guest-chosen name is text: no element was made of it, no handler ran.
  assert.equal(await changeRow(xss).getByTestId("change-path").innerText(), xss);
  assert.equal(await page.evaluate(() => document.querySelectorAll('[data-testid="screen-changes"] img').length), 0);
  await changeRow(xss).getByTestId("change-open").click();
  await page.getByTestId("change-detail-path").filter({ hasText: xss }).waitFor();
  // So is the text of its diff.
  await page.getByTestId("change-view").filter({ hasText: "<img src=y onerror=window.__xss=2>" }).waitFor();
  assert.equal(await page.evaluate(() => document.querySelectorAll('[data-testid="screen-changes"] img').length), 0);
  assert.equal(await page.evaluate(() => window.__xss), undefined);

  // The edit's diff, inline and side by side.
  await changeRow("q3-summary.md").getByTestId("change-open").click();
  await page.getByTestId("diff-inline").click();
  const inlineView = page.getByTestId("diff-inline-view");
  await inlineView.waitFor();
  assert.match(await inlineView.innerText(), /revenue up 12%/);
  assert.match(await inlineView.locator('[data-kind="del"]').first().innerText(), /revenue up/);
  assert.match(await changeRow("q3-summary.md").innerText(), /\+2\s*−1/);
  await screenshot(page, "09-changes-inline");
  await page.getByTestId("diff-split").click();
  await page.getByTestId("diff-split-view").waitFor();
  assert.match(await page.getByTestId("diff-split-view").innerText(), /costs flat/);
  await screenshot(page, "09b-changes-side-by-side");

  // Apply only the edit: the folder has it, and still has the deleted file.
  await changeRow("q3-summary.md").getByTestId("change-select").check();
  await page.getByTestId("changes-apply-selected").click();
  await changeRow("q3-summary.md").waitFor({ state: "detached", timeout: 30_000 });
  assert.equal(readFileSync(q3, "utf8"), edited);
  assert.equal(readFileSync(draft, "utf8"), "draft to keep\n");
  const cp = page.getByTestId("checkpoint").first();
  await cp.waitFor();
  assert.equal(await cp.getAttribute("data-undone"), "false");
  assert.equal(await page.getByTestId("changes-badge").innerText(), "2");
  await screenshot(page, "10-changes-applied");

  // Undo puts the file back exactly: bytes, permissions, modification time.
  await cp.getByTestId("checkpoint-undo").click();
  await page.getByTestId("confirm-dialog").waitFor();
  await page.getByTestId("confirm-ok").click();
  await page.locator('[data-testid="checkpoint"][data-undone="true"]').first().waitFor({ timeout: 30_000 });
  const after = statSync(q3);
  assert.deepEqual(readFileSync(q3), before.bytes);
  assert.equal(after.mode, before.stat.mode);
  assert.equal(after.mtimeMs, before.stat.mtimeMs);

  // Discard the deletion, after a confirmation: the file stays.
  await changeRow("old-draft.txt").getByTestId("change-select").check();
  await page.getByTestId("changes-discard-selected").click();
  await page.getByTestId("confirm-dialog").waitFor();
  await screenshot(page, "11-changes-discard-confirm");
  await page.getByTestId("confirm-ok").click();
  await changeRow("old-draft.txt").waitFor({ state: "detached", timeout: 30_000 });
  assert.equal(readFileSync(draft, "utf8"), "draft to keep\n");

  // Cancel leaves everything as it is; Discard all then empties the list.
  await page.getByTestId("changes-discard-all").click();
  await page.getByTestId("confirm-cancel").click();
  await changeRow(xss).waitFor();
  await page.getByTestId("changes-discard-all").click();
  await page.getByTestId("confirm-ok").click();
  await page.getByTestId("changes-empty").waitFor({ timeout: 30_000 });
  await page.getByTestId("changes-badge").waitFor({ state: "detached" });
  assert.ok(!existsSync(join(ws, xss)));
  await screenshot(page, "12-changes-done");
});

test("changes: your own edit meanwhile is a conflict; Apply keeps it, Apply anyway keeps it in the checkpoint", { timeout: 120_000 }, async () => {
  const plan = join(ws, "plan.txt");
  await go("changes");
  await startTask("echo 'sandbox plan' > /workspace/plan.txt");
  await changeRow("plan.txt").waitFor({ timeout: 60_000 });
  // The user edits the file on the host; the next task's end reads the layer again.
  writeFileSync(plan, "my plan, edited\n");
  await startTask("true");
  await changeRow("plan.txt").getByTestId("change-conflict").waitFor({ timeout: 60_000 });

  await changeRow("plan.txt").getByTestId("change-select").check();
  await page.getByTestId("changes-apply-selected").click();
  await page.getByTestId("changes-conflicts").waitFor();
  assert.equal(readFileSync(plan, "utf8"), "my plan, edited\n");
  await changeRow("plan.txt").getByTestId("change-open").click();
  assert.match(await page.getByTestId("change-conflict-note").innerText(), /You changed this file on your computer after the sandbox read it/);
  await screenshot(page, "13-changes-conflict");

  await page.getByTestId("change-force").click();
  await changeRow("plan.txt").waitFor({ state: "detached", timeout: 30_000 });
  assert.equal(readFileSync(plan, "utf8"), "sandbox plan\n");
  const cp = page.locator('[data-testid="checkpoint"][data-undone="false"]').first();
  await cp.getByTestId("checkpoint-undo").click();
  await page.getByTestId("confirm-ok").click();
  await page.waitForFunction(() => !document.querySelector('[data-testid="checkpoint"][data-undone="false"]'), null, { timeout: 30_000 });
  assert.equal(readFileSync(plan, "utf8"), "my plan, edited\n");
});

test("settings: where data and logs live", async () => {
  await go("settings");
  const stateDir = `${serve.dirs.XDG_STATE_HOME}/airlock`;
  await page.getByTestId("about-state-dir").filter({ hasText: stateDir }).waitFor();
  assert.match(await page.getByTestId("about-console-log").innerText(), /console\.log$/);
  await page.getByTestId("about-cache-dir").filter({ hasText: `${serve.dirs.XDG_CACHE_HOME}/airlock` }).waitFor();
  await screenshot(page, "08-settings");
});

test("no uncaught errors in the page", () => {
  assert.deepEqual(pageErrors, []);
});
