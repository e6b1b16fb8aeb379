// Harness for the browser tests: a real `airlock serve --http` with its own
// XDG folders, a local web server for the sandbox to reach through the gate,
// and Debian's Chromium driven by playwright-core.

import { spawn, execFileSync } from "node:child_process";
import { createServer } from "node:http";
import { chownSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer as createNetServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
export const ARTIFACTS = join(ROOT, "tests/browser/artifacts");
const CHROMIUM = process.env.AIRLOCK_CHROMIUM ?? "/usr/bin/chromium";
// The CLI and the guest image under test: this checkout's unless the
// environment names others (as the Go e2e suites take them).
const AIRLOCK = process.env.AIRLOCK_E2E_BIN ?? join(ROOT, "bin/airlock");
const IMAGE_DIR = process.env.AIRLOCK_IMAGE_DIR ?? join(ROOT, "images/out");

/** freePort asks the kernel for a loopback port nobody uses right now. */
export function freePort() {
  return new Promise((ok, fail) => {
    const s = createNetServer();
    s.on("error", fail);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => ok(port));
    });
  });
}

/** fileServer answers every GET with a line naming the path, on 127.0.0.1. */
export async function fileServer() {
  const srv = createServer((req, res) => {
    res.writeHead(200, { "Content-Type": "text/plain" });
    res.end(`hello from files.test ${req.url}\n`);
  });
  await new Promise((ok) => srv.listen(0, "127.0.0.1", ok));
  return { port: srv.address().port, close: () => new Promise((ok) => srv.close(ok)) };
}

function need(path, how) {
  if (!existsSync(path)) throw new Error(`${path} is missing: ${how}`);
}

/**
 * startServe runs bin/airlock serve --http on a free loopback port with
 * private XDG folders under a temp dir, the given settings, and
 * --no-boot (the test starts the machine from the UI). It resolves once the
 * token URL is printed. env adds to serve's environment (HOME, for one).
 */
export async function startServe(settings, env = {}) {
  need(AIRLOCK, "run make airlock (after make frontend)");
  need(IMAGE_DIR, "build the guest image: go run ./images/cmd/airlock-image -arch amd64 -q");
  need(join(ROOT, "frontend/dist/index.html"), "run make frontend, then make airlock");

  const tmp = mkdtempSync(join(tmpdir(), "airlock-browser-"));
  const dirs = {
    XDG_RUNTIME_DIR: join(tmp, "run"),
    XDG_CONFIG_HOME: join(tmp, "config"),
    XDG_STATE_HOME: join(tmp, "state"),
    XDG_CACHE_HOME: join(tmp, "cache"),
  };
  for (const d of Object.values(dirs)) mkdirSync(d, { recursive: true, mode: 0o700 });
  mkdirSync(join(dirs.XDG_CONFIG_HOME, "airlock"), { recursive: true });
  writeFileSync(join(dirs.XDG_CONFIG_HOME, "airlock/settings.json"), JSON.stringify(settings, null, 2));

  const port = await freePort();
  const proc = spawn(AIRLOCK, ["serve", "--no-boot", "--http", `127.0.0.1:${port}`], {
    cwd: ROOT,
    env: { ...process.env, ...dirs, AIRLOCK_IMAGE_DIR: IMAGE_DIR, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stderr = "";
  const exited = new Promise((ok) => proc.on("exit", (code, signal) => ok({ code, signal })));
  const url = await new Promise((ok, fail) => {
    const timer = setTimeout(() => fail(new Error(`airlock serve printed no URL in 20 s:\n${stderr}`)), 20000);
    proc.stderr.on("data", (b) => {
      stderr += b;
      const m = /browser UI and API at (http:\/\/\S+\?token=[0-9a-f]+)/.exec(stderr);
      if (m) {
        clearTimeout(timer);
        ok(m[1]);
      }
    });
    proc.stdout.resume();
    exited.then(({ code }) => fail(new Error(`airlock serve exited (${code}):\n${stderr}`)));
  });

  return {
    url,
    tmp,
    dirs,
    stderr: () => stderr,
    /** stop sends SIGINT (Ctrl-C) and waits for a clean exit. */
    async stop() {
      if (proc.exitCode !== null || proc.signalCode !== null) return exited;
      proc.kill("SIGINT");
      let timer;
      const timeout = new Promise((ok) => (timer = setTimeout(() => ok(null), 30000)));
      const res = await Promise.race([exited, timeout]);
      clearTimeout(timer);
      if (res === null) {
        proc.kill("SIGKILL");
        throw new Error(`airlock serve did not stop within 30 s of SIGINT:\n${stderr}`);
      }
      return res;
    },
    cleanup() {
      rmSync(tmp, { recursive: true, force: true });
    },
  };
}

/** leftovers lists processes whose command line mentions path (QEMU, virtiofsd, serve). */
export function leftovers(path) {
  const out = execFileSync("ps", ["-eo", "pid=,args="], { encoding: "utf8" });
  return out
    .split("\n")
    .filter((l) => l.includes(path) && !l.includes("ps -eo"))
    .map((l) => l.trim());
}

/** workspaceDir makes a folder to share, owned by the guest's task user when we are root. */
export function workspaceDir(tmp) {
  const ws = join(tmp, "reports");
  mkdirSync(ws);
  writeFileSync(join(ws, "q3-summary.md"), "# Q3\nrevenue up\n");
  writeFileSync(join(tmp, "not-a-folder.txt"), "a file\n");
  if (process.getuid?.() === 0) {
    chownSync(ws, 1000, 1000);
    chownSync(join(ws, "q3-summary.md"), 1000, 1000);
  }
  return ws;
}

/** browser launches Debian's Chromium headless with a fresh profile. */
export async function browser(profileRoot) {
  need(CHROMIUM, "apt-get install -y chromium");
  const profile = join(profileRoot, "chromium-profile");
  mkdirSync(profile, { recursive: true });
  const ctx = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    viewport: { width: 1360, height: 860 },
    deviceScaleFactor: 1,
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
  return ctx;
}

export async function screenshot(page, name) {
  mkdirSync(ARTIFACTS, { recursive: true });
  const path = join(ARTIFACTS, `${name}.png`);
  await page.screenshot({ path, fullPage: true, animations: "disabled" });
  return path;
}
