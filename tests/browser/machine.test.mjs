// The Machine screen sets the machine's size: a real `airlock serve --http
// --no-boot`, CPUs and memory typed on the screen, checked by the service
// against this computer (a refusal says why), saved in settings.json and
// applied on the next start, which the screen says while the VM runs on
// its old size. The image chooser is a radio group like the other
// segmented controls.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { cpus } from "node:os";
import { after, before, test } from "node:test";
import { browser, leftovers, screenshot, startServe } from "./harness.mjs";

const BOOT_TIMEOUT = 150_000;
let serve, ctx, page;
const pageErrors = [];

before(async () => {
  serve = await startServe({});
  ctx = await browser(serve.tmp);
  page = await ctx.newPage();
  page.on("pageerror", (e) => pageErrors.push(e.message));
  await page.goto(serve.url);
  await page.getByTestId("nav-machine").click();
  await page.getByTestId("screen-machine").waitFor({ state: "visible" });
});

after(async () => {
  await ctx?.close().catch(() => {});
  if (serve) {
    const res = await serve.stop();
    const left = leftovers(serve.tmp);
    serve.cleanup();
    assert.deepEqual(left, [], "processes left behind after airlock serve stopped");
    assert.equal(res?.code, 0, `serve exited ${JSON.stringify(res)}`);
  }
  assert.deepEqual(pageErrors, []);
});

function saved() {
  return JSON.parse(readFileSync(`${serve.dirs.XDG_CONFIG_HOME}/airlock/settings.json`, "utf8"));
}

async function setSize(n, gb) {
  await page.getByTestId("vm-cpus-input").fill(String(n));
  await page.getByTestId("vm-memory-input").fill(String(gb));
  await page.getByTestId("vm-size-apply").click();
}

async function errorText() {
  const err = page.getByTestId("vm-size-error");
  await err.waitFor({ state: "visible" });
  return err.innerText();
}

test("the size form shows the settings and this computer's limits, not the settings file", async () => {
  assert.equal(await page.getByTestId("vm-cpus-input").inputValue(), "2");
  assert.equal(await page.getByTestId("vm-memory-input").inputValue(), "1");
  const note = await page.getByTestId("vm-size-note").innerText();
  assert.match(note, new RegExp(`1 to ${Math.min(cpus().length, 64)} processors`));
  assert.match(note, /applies on the next start/);
  assert.doesNotMatch(await page.getByTestId("screen-machine").innerText(), /settings file/);
});

test("a size this computer cannot give is refused with the reason, and nothing is saved", async () => {
  const n = cpus().length;
  await setSize(n + 1, 1);
  assert.equal(await errorText(), `${n + 1} CPUs: this computer has ${n}; choose between 1 and ${n}`);
  await page.waitForFunction(() => document.querySelector('[data-testid="vm-cpus-input"]')?.classList.contains("input-error"));
  assert.equal(await page.getByTestId("vm-memory-input").getAttribute("class"), "input size-input");
  await setSize(1, 0.1);
  assert.match(await errorText(), /^102 MiB of memory is too little for Linux to start; choose at least 256 MiB$/);
  await page.waitForFunction(() => document.querySelector('[data-testid="vm-memory-input"]')?.classList.contains("input-error"));
  await setSize(1, 100000);
  assert.match(await errorText(), /this computer has .* choose at most/);
  await setSize("", 1);
  assert.equal(await errorText(), "Type a whole number of processors.");
  const st = saved();
  assert.ok(st.cpus === undefined || st.cpus === 2, JSON.stringify(st));
  await screenshot(page, "machine-size-refused");
});

test("a size set while stopped is saved and the next start uses it", { timeout: BOOT_TIMEOUT + 30_000 }, async () => {
  await setSize(1, 0.75);
  await page.waitForFunction(() => document.querySelector('[data-testid="vm-cpus"]')?.textContent === "1");
  assert.equal(await page.getByTestId("vm-size-error").innerText(), "");
  const st = saved();
  assert.equal(st.cpus, 1);
  assert.equal(st.memory_mib, 768);
  await page.getByTestId("vm-start").click();
  await page.waitForFunction(() => document.querySelector('[data-testid="vm-state"]')?.getAttribute("data-state") === "running", null, { timeout: BOOT_TIMEOUT });
  assert.equal(await page.getByTestId("vm-cpus").innerText(), "1");
  assert.equal(await page.getByTestId("vm-memory").innerText(), "768 MB");
});

test("a size set while it runs applies on the next start, and the screen says so", async () => {
  await setSize(2, 1);
  const note = page.getByTestId("vm-size-note");
  await page.waitForFunction(() => /Set to 2 processors and 1 GB: applies on the next start/.test(document.querySelector('[data-testid="vm-size-note"]')?.textContent ?? ""));
  assert.match(await note.innerText(), /Restart to apply it now/);
  // The running VM keeps its size until then.
  assert.equal(await page.getByTestId("vm-cpus").innerText(), "1");
  assert.equal(saved().cpus, 2);
  await screenshot(page, "machine-size-pending");
  await page.getByTestId("vm-restart").click();
  await page.waitForFunction(() => document.querySelector('[data-testid="vm-cpus"]')?.textContent === "2", null, { timeout: BOOT_TIMEOUT });
  await page.waitForFunction(() => !/Set to/.test(document.querySelector('[data-testid="vm-size-note"]')?.textContent ?? ""));
});

test("the image chooser is a radio group styled like the other segmented controls", async () => {
  const group = page.getByTestId("vm-image");
  assert.equal(await group.getAttribute("role"), "radiogroup");
  assert.equal(await group.getAttribute("data-value"), "minimal");
  assert.equal(await page.getByTestId("vm-image-minimal").getAttribute("aria-checked"), "true");
  assert.equal(await page.getByTestId("vm-image-standard").getAttribute("aria-checked"), "false");
  assert.match((await group.getAttribute("class")) ?? "", /\bsegmented\b/);
  assert.equal(await page.locator('[data-testid="screen-machine"] select').count(), 0, "no unstyled select left");
});
