// The Changes screen's drawing of what the service answers, without a VM:
// the page runs against a real `airlock serve --http --no-boot`, and the
// few change endpoints answer, through Playwright's routing, what a hostile
// guest could make the service list (markup in paths, diff text and link
// targets; a file named .png that is not an image; 5,000 changes). What a
// real VM's changes look like, applied and undone, is airlock.test.mjs's
// part.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { browser, screenshot, startServe } from "./harness.mjs";

let serve, ctx, page;
const pageErrors = [];
const dialogs = [];

// A 16×16 PNG.
const PNG = Buffer.from(
  "iVBORw0KGgoAAAANSUhEUgAAABAAAAAQCAYAAAAf8/9hAAAAIUlEQVR4nGNgGAX/GRgY/jMwMPxnYGBgYBgFo2AUjAIqAQBq8gEB0w9PJwAAAABJRU5ErkJggg==",
  "base64",
);
const EVIL = "<img src=x onerror=window.__xss=1>.txt";
const EVIL_LINK = "<img src=x onerror=window.__xss=3>";
const EVIL_DIFF = `--- a/${EVIL}\n+++ b/${EVIL}\n@@ -0,0 +1,2 @@\n+<script>window.__xss=2</script>\n+<img src=y onerror=window.__xss=2>\n`;

let entries = [];
let checkpoints = [];
const posted = [];
const usage = { pending_bytes: 50_000, checkpoint_bytes: 1_200_000, limit_bytes: 8 * 2 ** 30 };

function json(route, body) {
  return route.fulfill({ status: 200, contentType: "application/json", body: JSON.stringify(body) });
}

before(async () => {
  serve = await startServe({});
  ctx = await browser(serve.tmp);
  page = await ctx.newPage();
  page.on("pageerror", (e) => pageErrors.push(e.message));
  page.on("dialog", (d) => (dialogs.push(d.message()), d.dismiss()));
  await page.route(/\/v1\/changes$/, (r) => json(r, { mode: "review", entries, usage }));
  await page.route(/\/v1\/checkpoints$/, (r) => json(r, { checkpoints, usage }));
  await page.route(/\/v1\/changes\/diff\?/, (r) => {
    const path = new URL(r.request().url()).searchParams.get("path");
    const body = path === EVIL ? EVIL_DIFF : `--- a/${path}\n+++ b/${path}\n@@ -1,2 +1,2 @@\n same\n-old line\n+new line\n`;
    return r.fulfill({ status: 200, contentType: "text/plain; charset=utf-8", body });
  });
  await page.route(/\/v1\/changes\/content\?/, (r) => {
    const path = new URL(r.request().url()).searchParams.get("path");
    // fake.png holds a page, as the service's sniffing would label it.
    if (path === "fake.png") return r.fulfill({ status: 200, contentType: "text/html; charset=utf-8", body: "<script>window.__xss=4</script>" });
    return r.fulfill({ status: 200, contentType: "image/png", body: PNG });
  });
  for (const [re, name] of [
    [/\/v1\/changes\/apply$/, "apply"],
    [/\/v1\/changes\/discard$/, "discard"],
    [/\/v1\/checkpoints\/undo$/, "undo"],
  ]) {
    await page.route(re, (r) => {
      const body = JSON.parse(r.request().postData());
      posted.push({ name, body });
      if (name === "apply") return json(r, { checkpoint: "cp1", applied: body.paths });
      if (name === "discard") return json(r, { discarded: body.paths });
      return json(r, { id: body.id, time: new Date().toISOString(), paths: ["a"], bytes: 1, summary: "1 modified", undone: true });
    });
  }
  await page.goto(serve.url);
  await page.getByTestId("connection").getByText("Stopped").waitFor();
});

after(async () => {
  await ctx?.close().catch(() => {});
  await serve?.stop();
  serve?.cleanup();
});

async function show() {
  // Leaving and coming back reads the changes again.
  await page.getByTestId("nav-settings").click();
  await page.getByTestId("nav-changes").click();
  await page.getByTestId("screen-changes").waitFor({ state: "visible" });
}

function row(path) {
  return page.locator(`[data-testid="change"][data-path="${path.replace(/["\\]/g, "\\$&")}"]`);
}

test("guest-chosen paths, diff text and link targets are shown as text, never as markup", async () => {
  entries = [
    { path: EVIL, kind: "added", type: "file", size: 60, text: true, lines_added: 2 },
    { path: "lnk", kind: "added", type: "symlink", link: EVIL_LINK, size: 0 },
    { path: "ok.png", kind: "added", type: "file", size: PNG.length },
    { path: "fake.png", kind: "added", type: "file", size: 31 },
  ];
  await show();
  await row(EVIL).waitFor();
  assert.equal(await row(EVIL).getByTestId("change-path").innerText(), EVIL);

  await row(EVIL).getByTestId("change-open").click();
  await page.getByTestId("diff-inline-view").waitFor();
  const text = await page.getByTestId("diff-inline-view").innerText();
  assert.ok(text.includes("<script>window.__xss=2</script>") && text.includes("<img src=y onerror=window.__xss=2>"), text);
  await page.getByTestId("diff-split").click();
  await page.getByTestId("diff-split-view").waitFor();
  assert.ok((await page.getByTestId("diff-split-view").innerText()).includes("<img src=y onerror=window.__xss=2>"));
  await page.getByTestId("diff-inline").click();

  await row("lnk").getByTestId("change-open").click();
  await page.getByTestId("change-oneline").filter({ hasText: `Link to ${EVIL_LINK}` }).waitFor();

  // Nothing the guest named became an element, and no handler ran.
  const screen = page.getByTestId("screen-changes");
  assert.equal(await screen.locator("img, script").count(), 0);
  assert.equal(await page.evaluate(() => window.__xss), undefined);
  await screenshot(page, "c1-changes-markup-as-text");
});

test("an image is previewed; a file named .png that is not an image gets a summary", async () => {
  await row("ok.png").getByTestId("change-open").click();
  const img = page.getByTestId("change-preview");
  await img.waitFor();
  assert.match(await img.getAttribute("src"), /^blob:/);
  await page.waitForFunction(() => document.querySelector('[data-testid="change-preview"]')?.naturalWidth === 16);

  await row("fake.png").getByTestId("change-open").click();
  await page.getByTestId("change-oneline").filter({ hasText: "Binary file" }).waitFor();
  assert.equal(await page.getByTestId("change-preview").count(), 0);
  assert.equal(await page.evaluate(() => window.__xss), undefined);
});

test("discard asks first: cancel keeps everything, confirm sends exactly the selection", async () => {
  await row("ok.png").getByTestId("change-select").check();
  await row("lnk").getByTestId("change-select").check();
  await page.getByTestId("changes-discard-selected").click();
  const dlg = page.getByTestId("confirm-dialog");
  await dlg.waitFor();
  assert.match(await dlg.innerText(), /Discard 2 changes\?/);
  await page.keyboard.press("Escape");
  await dlg.waitFor({ state: "detached" });
  assert.equal(posted.filter((p) => p.name === "discard").length, 0);

  await page.getByTestId("changes-discard-selected").click();
  await page.getByTestId("confirm-ok").click();
  await dlg.waitFor({ state: "detached" });
  const d = posted.filter((p) => p.name === "discard");
  assert.equal(d.length, 1);
  assert.deepEqual(d[0].body.paths.sort(), ["lnk", "ok.png"]);
  assert.deepEqual(dialogs, [], "no browser dialogs: the page's own confirm only");
});

test("a conflict is explained and applied only when forced; Undo asks, then names its checkpoint", async () => {
  entries = [
    { path: "notes.txt", kind: "modified", type: "file", size: 20, text: true, lines_added: 1, lines_removed: 1, conflict: true },
    { path: ".envrc", kind: "added", type: "file", size: 20, text: true, lines_added: 1, host_runs: true },
  ];
  checkpoints = [{ id: "cp-older", time: new Date(Date.now() - 60_000).toISOString(), paths: ["a", "b"], bytes: 2048, summary: "2 modified" }];
  await show();
  await row("notes.txt").getByTestId("change-conflict").waitFor();
  await row(".envrc").getByTestId("change-host-runs").waitFor();
  await row("notes.txt").getByTestId("change-open").click();
  const note = page.getByTestId("change-conflict-note");
  assert.match(await note.innerText(), /You changed this file on your computer after the sandbox read it/);
  assert.match(await note.innerText(), /Apply anyway .*keeps yours in the checkpoint/);
  await page.getByTestId("change-force").click();
  const a = () => posted.filter((p) => p.name === "apply");
  for (let i = 0; i < 50 && a().length === 0; i++) await new Promise((r) => setTimeout(r, 50));
  assert.deepEqual(a()[0].body, { paths: ["notes.txt"], force: true });

  await row(".envrc").getByTestId("change-open").click();
  await page.getByTestId("change-host-runs-note").waitFor();

  // The checkpoints and the space they take.
  assert.match(await page.getByTestId("changes-usage").innerText(), /of 8\.0 GB used/);
  await page.getByTestId("checkpoint-undo").click();
  await page.getByTestId("confirm-cancel").click();
  assert.equal(posted.filter((p) => p.name === "undo").length, 0);
  await page.getByTestId("checkpoint-undo").click();
  await page.getByTestId("confirm-ok").click();
  for (let i = 0; i < 50 && !posted.some((p) => p.name === "undo"); i++) await new Promise((r) => setTimeout(r, 50));
  assert.deepEqual(posted.find((p) => p.name === "undo").body, { id: "cp-older" });
  await screenshot(page, "c2-changes-conflict");
});

test("5,000 waiting changes draw a page at a time, the page keeps its height, and the list works from the keyboard", async () => {
  entries = Array.from({ length: 5000 }, (_, i) => ({ path: `gen/file-${String(i).padStart(4, "0")}.txt`, kind: "added", type: "file", size: 10, text: true, lines_added: 1 }));
  const t0 = Date.now();
  await show();
  await page.getByTestId("changes-count-text").filter({ hasText: "5,000 changes waiting" }).waitFor();
  const ms = Date.now() - t0;
  assert.ok(ms < 5000, `the screen took ${ms} ms`);
  assert.equal(await page.getByTestId("change").count(), 200);
  assert.equal(await page.getByTestId("changes-badge").innerText(), "5000");
  assert.match(await page.getByTestId("changes-more").innerText(), /4,800 not shown/);
  await page.getByTestId("changes-more").click();
  assert.equal(await page.getByTestId("change").count(), 400);
  const height = await page.evaluate(() => document.documentElement.scrollHeight);
  assert.ok(height < 2500, `the page is ${height} px high`);

  // Down and up move between changes and open them; a checkbox takes Space.
  await page.getByTestId("change-open").first().focus();
  await page.keyboard.press("ArrowDown");
  await page.keyboard.press("ArrowDown");
  await page.keyboard.press("ArrowUp");
  assert.equal(await page.evaluate(() => document.activeElement?.closest("li")?.dataset.path), "gen/file-0001.txt");
  await page.getByTestId("change-detail-path").filter({ hasText: "gen/file-0001.txt" }).waitFor();
  await page.getByTestId("change-select").first().focus();
  await page.keyboard.press("Space");
  await page.keyboard.press("ArrowDown");
  await page.keyboard.press("Space");
  assert.match(await page.getByTestId("changes-apply-selected").innerText(), /Apply 2 selected/);

  // All selects every change, not only the ones drawn, and Apply all names them all.
  await page.getByTestId("changes-select-all").check();
  assert.match(await page.getByTestId("changes-apply-selected").innerText(), /5,000 selected/);
  await page.getByTestId("changes-select-all").uncheck();
  await page.getByTestId("changes-apply-all").click();
  for (let i = 0; i < 50 && posted.filter((p) => p.name === "apply").length < 2; i++) await new Promise((r) => setTimeout(r, 50));
  assert.equal(posted.filter((p) => p.name === "apply")[1].body.paths.length, 5000);
  await screenshot(page, "c3-changes-many");
});

test("no uncaught errors in the page", () => {
  assert.deepEqual(pageErrors, []);
});
