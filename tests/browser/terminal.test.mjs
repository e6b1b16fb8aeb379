// The Terminal screen against a real `airlock serve --http` and a real VM:
// a shell on a PTY in the guest, typed into through xterm.js. Output comes
// back, the size follows the panel (`stty size`), Ctrl-C stops a `sleep`,
// a reload reattaches to the same shell with its recent screen, and Close
// ends it. The same again without WebSockets, as the desktop window (whose
// webview serves the API from inside the app) follows a terminal: by
// requests.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { browser, leftovers, screenshot, startServe, workspaceDir } from "./harness.mjs";

const BOOT_TIMEOUT = 150_000;

let serve, ctx, page, id;
const pageErrors = [];

before(async () => {
  serve = await startServe({});
  const ws = workspaceDir(serve.tmp);
  ctx = await browser(serve.tmp);
  page = await ctx.newPage();
  page.on("pageerror", (e) => pageErrors.push(e.message));
  await page.goto(serve.url);
  // Share a folder through the API as the page would (the Workspace screen has its own tests).
  const res = await page.evaluate(async (dir) => {
    const r = await fetch("/v1/workspace", { method: "PUT", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ dir, read_only: false }) });
    return r.status;
  }, ws);
  assert.equal(res, 200);
});

after(async () => {
  await ctx?.close().catch(() => {});
  if (serve) {
    const stopped = await serve.stop();
    const left = leftovers(serve.tmp);
    serve.cleanup();
    assert.deepEqual(left, [], "processes left behind after airlock serve stopped");
    assert.equal(stopped?.code, 0, `airlock serve exit: ${JSON.stringify(stopped)}\n${serve.stderr()}`);
  }
  assert.deepEqual(pageErrors, []);
});

function screen() {
  return page.locator('[data-testid="terminal"] .xterm-rows').innerText();
}

async function waitForScreen(text, timeout = 60_000) {
  try {
    await page.waitForFunction(
      (t) => document.querySelector('[data-testid="terminal"] .xterm-rows')?.textContent.includes(t),
      text,
      { timeout },
    );
  } catch (e) {
    throw new Error(`the terminal never showed ${JSON.stringify(text)}; it shows:\n${await screen()}`, { cause: e });
  }
}

/** type sends keystrokes to the terminal, as a person typing into it. */
async function type(text) {
  await page.getByTestId("terminal").click();
  await page.keyboard.type(text);
}

async function task() {
  return page.evaluate(async (id) => (await fetch(`/v1/tasks/${id}`)).json(), id);
}

/** flow is what a person does with a terminal; it runs over each transport. */
function flow(transport) {
  test("Open terminal gives a shell: typed commands run and their output shows", async () => {
    await page.getByTestId("nav-terminal").click();
    await page.getByTestId("screen-terminal").waitFor({ state: "visible" });
    await page.getByTestId("terminal-open").click();
    await page.locator('[data-testid="terminal-state"][data-state="Connected"]').waitFor({ timeout: BOOT_TIMEOUT });
    id = await page.getByTestId("terminal").getAttribute("data-terminal");
    assert.ok(id);
    // The arithmetic makes the output differ from the echoed command line.
    await type("echo hello-$((6*7)) in $PWD\n");
    await waitForScreen("hello-42 in /workspace", BOOT_TIMEOUT);
    const t = await task();
    assert.equal(t.state, "running");
    assert.equal(t.command.tty, true);
    await screenshot(page, `terminal-${transport}-01-open`);
  });

  test("the terminal's size follows the panel", async () => {
    const sizeOf = async () => {
      const el = page.getByTestId("terminal");
      return `${await el.getAttribute("data-rows")} ${await el.getAttribute("data-cols")}`;
    };
    const before = await sizeOf();
    // sed marks the answer so the echoed command line cannot match it.
    await type("clear; stty size | sed 's/^/size-is /'\n");
    await waitForScreen(`size-is ${before}`);
    await page.setViewportSize({ width: 1000, height: 640 });
    await page.waitForFunction((b) => {
      const el = document.querySelector('[data-testid="terminal"]');
      return `${el.dataset.rows} ${el.dataset.cols}` !== b;
    }, before);
    const after = await sizeOf();
    await type("clear; stty size | sed 's/^/size-is /'\n");
    await waitForScreen(`size-is ${after}`);
    await screenshot(page, `terminal-${transport}-02-resized`);
  });

  test("Ctrl-C reaches the shell: a sleep is interrupted", async () => {
    await type("clear; sleep 600; echo slept-$((1+1))\n");
    await page.waitForTimeout(1500);
    await page.keyboard.press("Control+C");
    await type("echo interrupted-$((2+3))\n");
    await waitForScreen("interrupted-5", 30_000);
    assert.doesNotMatch(await screen(), /slept-2/);
  });

  test("a reload reattaches to the same shell, with its recent screen", async () => {
    await type("export MARK=kept-$((3*3)); echo $MARK\n");
    await waitForScreen("kept-9");
    await page.reload();
    await page.getByTestId("screen-terminal").waitFor({ state: "visible" });
    await page.locator('[data-testid="terminal-state"][data-state="Connected"]').waitFor({ timeout: 30_000 });
    assert.equal(await page.getByTestId("terminal").getAttribute("data-terminal"), id);
    // The host sent the recent screen back, and the shell kept its variables.
    await waitForScreen("kept-9", 30_000);
    await type("echo again-$MARK\n");
    await waitForScreen("again-kept-9", 30_000);
    await screenshot(page, `terminal-${transport}-03-reattached`);
  });

  // xterm refuses other schemes unless told otherwise (allowNonHttpProtocols):
  // a guest must not get a javascript: link followed from this page.
  test("links the shell prints open only as web links, after asking", async () => {
    const dialogs = [];
    const onDialog = (d) => {
      dialogs.push(d.message());
      void d.dismiss();
    };
    page.on("dialog", onDialog);
    try {
      // OSC 8 hyperlinks: one to javascript:, one to a web page.
      await type("clear; printf '\\033]8;;javascript:alert(1)\\033\\\\evil-link\\033]8;;\\033\\\\ \\033]8;;https://example.test/x\\033\\\\web-link\\033]8;;\\033\\\\\\n'\n");
      const evil = page.getByTestId("terminal").locator(".xterm-rows span", { hasText: /^evil-link$/ });
      await evil.waitFor();
      // xterm's screen layer takes the pointer: click where the text is drawn.
      const clickOn = async (loc) => {
        const b = await loc.boundingBox();
        await page.mouse.move(b.x + b.width / 2, b.y + b.height / 2);
        await page.waitForTimeout(200);
        await page.mouse.click(b.x + b.width / 2, b.y + b.height / 2);
      };
      await clickOn(evil);
      await page.waitForTimeout(500);
      assert.deepEqual(dialogs, [], "a javascript: link asked to be followed");
      const web = page.getByTestId("terminal").locator(".xterm-rows span", { hasText: /^web-link$/ });
      await clickOn(web);
      await page.waitForTimeout(500);
      assert.equal(dialogs.length, 1, JSON.stringify(dialogs));
      assert.match(dialogs[0], /https:\/\/example\.test\/x/);
    } finally {
      page.off("dialog", onDialog);
    }
  });

  test("Close ends the shell and its task", async () => {
    await page.getByTestId("terminal-close").click();
    await page.locator('[data-testid="terminal-state"][data-state="Closed"]').waitFor({ timeout: 30_000 });
    const t = await task();
    assert.equal(t.state, "killed", JSON.stringify(t));
    await page.getByTestId("terminal-open").waitFor({ state: "visible" });
  });
}

describe("over a WebSocket", () => flow("websocket"));

describe("by requests, as in the desktop window", () => {
  before(async () => {
    page = await ctx.newPage();
    page.on("pageerror", (e) => pageErrors.push(e.message));
    page.on("websocket", (ws) => pageErrors.push(`a WebSocket was opened: ${ws.url()}`));
    await page.addInitScript(() => delete window.WebSocket);
    await page.setViewportSize({ width: 1360, height: 860 });
    await page.goto(serve.url.replace(/\?token=.*/, ""));
  });
  flow("requests");
});
