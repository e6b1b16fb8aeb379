// Harness for the MCP tests: a real `airlock serve` with its own XDG folders
// and workspace, and `airlock mcp` started by the official TypeScript SDK's
// stdio client transport, the way a desktop agent starts it.

import { execFile, spawn } from "node:child_process";
import { chownSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
// The CLI and the guest image under test: this checkout's unless the
// environment names others (as the Go e2e suites take them).
export const AIRLOCK = process.env.AIRLOCK_E2E_BIN ?? join(ROOT, "bin/airlock");
const IMAGE_DIR = process.env.AIRLOCK_IMAGE_DIR ?? join(ROOT, "images/out");

function need(path, how) {
  if (!existsSync(path)) throw new Error(`${path} is missing: ${how}`);
}

/**
 * sandboxHome makes a temp dir with private XDG folders, a settings.json
 * and a workspace folder (owned by the guest's task user when we are root),
 * and returns the environment every airlock process of the test gets.
 */
export function sandboxHome(settings = {}) {
  need(AIRLOCK, "run make airlock");
  need(IMAGE_DIR, "build the guest image: go run ./images/cmd/airlock-image -arch amd64 -q");
  const tmp = mkdtempSync(join(tmpdir(), "airlock-mcp-"));
  const dirs = {
    XDG_RUNTIME_DIR: join(tmp, "run"),
    XDG_CONFIG_HOME: join(tmp, "config"),
    XDG_STATE_HOME: join(tmp, "state"),
    XDG_CACHE_HOME: join(tmp, "cache"),
  };
  for (const d of Object.values(dirs)) mkdirSync(d, { recursive: true, mode: 0o700 });
  const ws = join(tmp, "project");
  mkdirSync(ws);
  writeFileSync(join(ws, "README.md"), "# project\n");
  if (process.getuid?.() === 0) {
    chownSync(ws, 1000, 1000);
    chownSync(join(ws, "README.md"), 1000, 1000);
  }
  mkdirSync(join(dirs.XDG_CONFIG_HOME, "airlock"), { recursive: true });
  writeFileSync(
    join(dirs.XDG_CONFIG_HOME, "airlock/settings.json"),
    JSON.stringify({ workspace: ws, changes: { [ws]: "direct" }, ...settings }, null, 2),
  );
  const env = { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: process.env.HOME ?? tmp, ...dirs, AIRLOCK_IMAGE_DIR: IMAGE_DIR };
  if (process.env.AIRLOCK_ACCEL) env.AIRLOCK_ACCEL = process.env.AIRLOCK_ACCEL;
  return { tmp, ws, env, cleanup: () => rmSync(tmp, { recursive: true, force: true }) };
}

/**
 * startServe runs `airlock serve --no-boot` (the service an `airlock mcp`
 * uses when it runs) and resolves once it serves its control socket.
 */
export async function startServe(env) {
  const proc = spawn(AIRLOCK, ["serve", "--no-boot"], { env, stdio: ["ignore", "ignore", "pipe"] });
  let stderr = "";
  const exited = new Promise((ok) => proc.on("exit", (code, signal) => ok({ code, signal })));
  await new Promise((ok, fail) => {
    const timer = setTimeout(() => fail(new Error(`airlock serve did not start in 20 s:\n${stderr}`)), 20000);
    proc.stderr.on("data", (b) => {
      stderr += b;
      if (stderr.includes("airlock: serving on")) {
        clearTimeout(timer);
        ok();
      }
    });
    exited.then(({ code }) => fail(new Error(`airlock serve exited (${code}):\n${stderr}`)));
  });
  return {
    stderr: () => stderr,
    /** stop sends SIGINT (Ctrl-C) and waits for the exit. */
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
  };
}

/**
 * connect starts `airlock mcp` through the SDK's StdioClientTransport and
 * initializes a session. Errors the client reports on its own (a line that
 * is not JSON, a message that fails the protocol's schema) are collected in
 * errors.
 */
export async function connect(env) {
  const transport = new StdioClientTransport({ command: AIRLOCK, args: ["mcp"], env, stderr: "pipe" });
  let stderr = "";
  transport.stderr.on("data", (b) => (stderr += b));
  const client = new Client({ name: "airlock-mcp-tests", version: "1.0.0" });
  const errors = [];
  client.onerror = (err) => errors.push(err);
  await client.connect(transport);
  return { client, transport, errors, stderr: () => stderr };
}

/** airlock runs the CLI with env and returns its stdout. */
export async function airlock(env, ...args) {
  const { stdout } = await promisify(execFile)(AIRLOCK, args, { env, timeout: 30000 });
  return stdout;
}

/** until polls fn every 250 ms until it returns a truthy value, or fails after ms. */
export async function until(what, ms, fn) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((ok) => setTimeout(ok, 250));
  }
}

/** leftovers lists processes whose command line mentions path (QEMU, serve, mcp). */
export async function leftovers(path) {
  const { stdout } = await promisify(execFile)("ps", ["-eo", "pid=,args="]);
  return stdout
    .split("\n")
    .filter((l) => l.includes(path) && !l.includes("ps -eo"))
    .map((l) => l.trim());
}
