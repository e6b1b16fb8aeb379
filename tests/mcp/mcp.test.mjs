// `airlock mcp` driven by the official TypeScript SDK client
// (@modelcontextprotocol/sdk, what desktop agents embed) over stdio, against
// a real `airlock serve` and a real VM. The tests run in order and share one
// session, as an agent's would.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { airlock, connect, leftovers, sandboxHome, startServe, until } from "./harness.mjs";

const BOOT = 180_000; // a first boot under TCG on a busy machine, with the template saved
const TOOLS = [
  "cancel_task",
  "egress_log",
  "list_changes",
  "list_tasks",
  "read_task_output",
  "run_command",
  "sandbox_status",
  "start_task",
  "task_status",
];

let home, serve, mcp;

before(async () => {
  home = sandboxHome();
  serve = await startServe(home.env);
  mcp = await connect(home.env);
});

after(async () => {
  await mcp?.client.close();
  await serve?.stop();
  if (home) {
    const left = await until("airlock and QEMU to exit", 20000, async () => {
      const l = await leftovers(home.tmp);
      return l.length === 0 ? [] : null;
    }).catch(async () => leftovers(home.tmp));
    home.cleanup();
    assert.deepEqual(left, [], "processes left behind");
  }
});

/** call runs a tool and returns the whole result; the client has checked it against the tool's output schema. */
function call(name, args, opts) {
  return mcp.client.callTool({ name, arguments: args }, undefined, { timeout: BOOT, ...opts });
}

/** text joins a result's text content. */
function text(res) {
  return res.content.filter((c) => c.type === "text").map((c) => c.text).join("\n");
}

/** ok calls a tool that must succeed and returns its structured content. */
async function ok(name, args, opts) {
  const res = await call(name, args, opts);
  assert.ok(!res.isError, `${name} failed: ${text(res)}`);
  assert.ok(res.structuredContent, `${name} returned no structured content: ${text(res)}`);
  return res.structuredContent;
}

/** toolError calls a tool that must fail as a tool error (not a protocol error) and returns its text. */
async function toolError(name, args) {
  const res = await call(name, args);
  assert.equal(res.isError, true, `${name}(${JSON.stringify(args)}) did not fail: ${text(res)}`);
  const t = text(res);
  assert.ok(t.length > 0, `${name}: error without a message`);
  return t;
}

/** unsafe lists what a terminal would act on in s: C0 controls other than tab and newline, DEL, C1 controls, bidi controls. */
function unsafe(s) {
  return [...s].filter((ch) => /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u200e\u200f\u202a-\u202e\u2066-\u2069]/u.test(ch));
}

test("initialize: the server says who it is, what it offers and what the sandbox is", () => {
  const v = mcp.client.getServerVersion();
  assert.equal(v.name, "airlock");
  assert.ok(v.version);
  assert.ok(mcp.client.getServerCapabilities().tools, "no tools capability");
  assert.match(mcp.client.getInstructions() ?? "", /\/workspace/);
});

test("tools/list: every tool, each with an object input schema and an output schema", async () => {
  const { tools } = await mcp.client.listTools();
  assert.deepEqual(tools.map((t) => t.name).sort(), TOOLS);
  for (const t of tools) {
    assert.ok(t.description?.length > 20, `${t.name}: no description`);
    assert.equal(t.inputSchema?.type, "object", `${t.name}: input schema ${JSON.stringify(t.inputSchema)}`);
    assert.equal(t.outputSchema?.type, "object", `${t.name}: output schema ${JSON.stringify(t.outputSchema)}`);
  }
  const run = tools.find((t) => t.name === "run_command");
  for (const p of ["argv", "command", "cwd", "env", "stdin", "timeout_seconds", "root"]) {
    assert.ok(run.inputSchema.properties?.[p], `run_command has no input ${p}`);
  }
  assert.ok([run.inputSchema.properties.argv.type].flat().includes("array"), JSON.stringify(run.inputSchema.properties.argv));
  assert.deepEqual(run.inputSchema.required ?? [], [], "run_command takes argv or command, neither is required alone");
});

test("run_command: stdout, stderr and the exit code, in the VM", { timeout: BOOT }, async () => {
  const res = await call("run_command", { command: "echo hi from $(uname -s) in $(pwd); echo oops >&2; exit 3" });
  assert.ok(!res.isError, text(res));
  const out = res.structuredContent;
  assert.equal(out.state, "exited", text(res));
  assert.equal(out.exit_code, 3);
  assert.equal(out.stdout, "hi from Linux in /workspace\n");
  assert.equal(out.stderr, "oops\n");
  // The text an agent reads says the same.
  assert.match(text(res), /exit code 3/);
  assert.match(text(res), /hi from Linux in \/workspace/);
  assert.match(text(res), /oops/);

  const argv = await ok("run_command", { argv: ["cat", "README.md"] });
  assert.equal(argv.exit_code, 0);
  assert.equal(argv.stdout, "# project\n");
});

test("run_command: a long command sends progress notifications", { timeout: 60_000 }, async () => {
  const progress = [];
  const res = await ok(
    "run_command",
    { command: "for i in 1 2 3 4 5; do echo line $i; sleep 1; done" },
    { onprogress: (p) => progress.push(p), resetTimeoutOnProgress: true },
  );
  assert.equal(res.exit_code, 0);
  assert.equal(res.stdout, "line 1\nline 2\nline 3\nline 4\nline 5\n");
  assert.ok(progress.length >= 2, `progress notifications: ${JSON.stringify(progress)}`);
  for (let i = 1; i < progress.length; i++) {
    assert.ok(progress[i].progress > progress[i - 1].progress, `progress must increase: ${JSON.stringify(progress)}`);
  }
  assert.ok(
    progress.some((p) => p.message?.includes(res.task_id)),
    `no progress message names task ${res.task_id}: ${JSON.stringify(progress)}`,
  );
});

test("notifications/cancelled: cancelling the request kills its task", { timeout: 60_000 }, async () => {
  const ac = new AbortController();
  const pending = call("run_command", { command: "sleep 313" }, { signal: ac.signal });
  pending.catch(() => {});
  // airlock tasks (the control API, not this MCP session) shows it running.
  const task = await until("the task to run", 30000, async () => {
    const ts = JSON.parse(await airlock(home.env, "tasks", "--json"));
    return ts.find((t) => t.command.shell === "sleep 313" && t.state === "running");
  });
  ac.abort("the user pressed stop");
  await assert.rejects(pending, /abort|stop/i);
  // The client sent notifications/cancelled; the server cancels the task.
  const ended = await until("the task to end", 20000, async () => {
    const ts = JSON.parse(await airlock(home.env, "tasks", "--json"));
    const t = ts.find((t) => t.id === task.id);
    return t.state !== "running" && t.state !== "queued" && t;
  });
  assert.equal(ended.state, "killed");
  // And nothing of it is left in the guest.
  const ps = await ok("run_command", { command: "pgrep -f 'sleep 31[3]' || echo none" });
  assert.equal(ps.stdout, "none\n");
  const st = await ok("task_status", { task_id: task.id });
  assert.equal(st.state, "killed");
  assert.equal(st.finished, true);
  // The cancelled request got no response (the client would report one
  // for an id it no longer waits on).
  assert.deepEqual(mcp.errors, [], "the client reported errors of its own");
});

test("bad arguments come back as tool errors that say what to send", async () => {
  assert.match(await toolError("run_command", {}), /give argv .* or command/);
  assert.match(await toolError("run_command", { argv: ["ls"], command: "ls" }), /either argv or command, not both/);
  assert.match(await toolError("run_command", { argv: "ls -la" }), /argv/);
  assert.match(await toolError("run_command", { command: "true", timeout_seconds: -1 }), /timeout_seconds is negative/);
  assert.match(await toolError("run_command", { command: "true", timeout_seconds: 99999999 }), /start_task/);
  assert.match(await toolError("run_command", { command: "true", env: { "1X": "y" } }), /not a valid variable name/);
  assert.match(await toolError("task_status", { task_id: "nosuchid" }), /no task "nosuchid".*list_tasks/);
  assert.match(await toolError("task_status", {}), /task_id/);
  assert.match(await toolError("read_task_output", { task_id: "nosuchid", offset: -5 }), /offset -5 is negative/);
  assert.match(await toolError("egress_log", { limit: 100000 }), /limit must be 1 to 500/);
});

test("output with terminal escapes and invalid UTF-8 comes back escaped", { timeout: 60_000 }, async () => {
  // OSC 52 (clipboard write), a colour, erase screen, a C1 CSI (UTF-8 and raw),
  // a bidi override, bytes that are not UTF-8, a bell, a carriage return.
  const script =
    "printf 'a\\033]52;c;ZXZpbA==\\007b \\033[31mred\\033[0m \\033[2J \\302\\233J \\233J \\342\\200\\256gnp.exe \\377\\376 done\\r\\n'; " +
    "printf 'err\\033[1A\\033[2K\\n' >&2";
  const res = await call("run_command", { command: script });
  assert.ok(!res.isError, text(res));
  const out = res.structuredContent;
  for (const [what, s] of [
    ["stdout", out.stdout],
    ["stderr", out.stderr],
    ["text", text(res)],
  ]) {
    assert.deepEqual(unsafe(s), [], `${what} keeps characters a terminal acts on: ${JSON.stringify(s)}`);
    assert.ok(!s.includes("\ufffd"), `${what} replaced bytes instead of escaping them: ${JSON.stringify(s)}`);
  }
  assert.equal(
    out.stdout,
    "a\\x1b]52;c;ZXZpbA==\\ab \\x1b[31mred\\x1b[0m \\x1b[2J \\u009bJ \\x9bJ \\u202egnp.exe \\xff\\xfe done\\r\n",
  );
  assert.equal(out.stderr, "err\\x1b[1A\\x1b[2K\n");
  assert.equal(out.exit_code, 0);

  // read_task_output returns the same bytes, escaped the same way.
  const read = await ok("read_task_output", { task_id: out.task_id, offset: 0 });
  const all = read.output.map((p) => p.text).join("");
  assert.deepEqual(unsafe(all), []);
  assert.ok(all.includes("\\x1b]52;c;"), all);
  assert.ok(all.includes("\\xff\\xfe"), all);
  assert.deepEqual(unsafe(text(await call("read_task_output", { task_id: out.task_id, offset: 0 }))), []);

  // A command line with control characters is listed escaped too.
  const raw = await ok("run_command", { argv: ["printf", "%s", "\u001b[2J\u009b"] });
  const list = await ok("list_tasks", { limit: 1 });
  assert.equal(list.tasks[0].task_id, raw.task_id);
  assert.deepEqual(unsafe(list.tasks[0].command), [], list.tasks[0].command);
  assert.deepEqual(unsafe(JSON.stringify(list)), []);
});

test("a sandbox stopped under a running command is a tool error that says what to do", { timeout: BOOT }, async () => {
  const pending = call("run_command", { command: "echo started; sleep 300" });
  const task = await until("the task to run", 30000, async () => {
    const ts = JSON.parse(await airlock(home.env, "tasks", "--json"));
    return ts.find((t) => t.command.shell === "echo started; sleep 300" && t.state === "running");
  });
  await airlock(home.env, "stop");
  const res = await pending;
  assert.equal(res.isError, true, `a command whose VM was stopped is not an error: ${text(res)}`);
  assert.match(text(res), new RegExp(task.id));
  assert.match(text(res), /stopped|lost/);
  assert.match(text(res), /again/);
  // The next command starts the sandbox again.
  const again = await ok("run_command", { command: "echo back" });
  assert.equal(again.stdout, "back\n");
});

test("a stopped Airlock service is a tool error that says what to do", { timeout: BOOT }, async () => {
  const { code } = await serve.stop();
  assert.equal(code, 0, serve.stderr());
  for (const [name, args] of [
    ["run_command", { command: "echo hi" }],
    ["sandbox_status", {}],
    ["list_tasks", {}],
  ]) {
    const t = await toolError(name, args);
    assert.match(t, /no Airlock service is running/, `${name}: ${t}`);
    assert.match(t, /Ask the user to start Airlock \(open the desktop app, or run `airlock serve`\)/, `${name}: ${t}`);
  }
  // Once the user starts it again, the same session works.
  serve = await startServe(home.env);
  const res = await ok("run_command", { command: "echo back again" });
  assert.equal(res.stdout, "back again\n");
  assert.deepEqual(mcp.errors, [], "the client reported errors of its own");
});
