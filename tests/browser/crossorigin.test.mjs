// A page on another loopback port (a local dev server showing a page the
// agent wrote, say) is same-site for the UI's cookie: Chromium sends the
// cookie with that page's form posts and fetches to the UI's port. The
// control API must not act on them. No VM is needed: `serve --no-boot`
// records a task as soon as the API accepts it (its run then fails).

import assert from "node:assert/strict";
import { createServer } from "node:http";
import { after, before, test } from "node:test";
import { browser, screenshot, startServe } from "./harness.mjs";

// The attack page tries every way a page can send a cookie-bearing POST
// without a CORS preflight: forms with enctype text/plain (a JSON object
// as the field name: the body is `{...}=`, and a JSON decoder stops at
// the object's end) into hidden frames, and no-cors fetches with a
// text/plain body. It sets its title to "done" when all were sent.
const ATTACK_PAGE = `<!doctype html>
<meta charset="utf-8">
<title>attack</title>
<body>
<script>
const ui = new URLSearchParams(location.search).get("ui");
const attempts = [
  ["/v1/egress/rules", { action: "allow", pattern: "form.evil.test" }, "form"],
  ["/v1/tasks", { shell: "echo form-pwned", root: true }, "form"],
  ["/v1/egress/rules", { action: "allow", pattern: "fetch.evil.test" }, "fetch"],
  ["/v1/tasks", { shell: "echo fetch-pwned", root: true }, "fetch"],
];
function sendForm(path, body, i) {
  return new Promise((done) => {
    const frame = document.createElement("iframe");
    frame.name = "f" + i;
    const form = document.createElement("form");
    form.method = "POST";
    form.enctype = "text/plain";
    form.action = ui + path;
    form.target = frame.name;
    const field = document.createElement("input");
    field.type = "hidden";
    field.name = JSON.stringify(body);
    field.value = "";
    form.append(field);
    document.body.append(frame, form);
    frame.onload = done;
    setTimeout(done, 5000);
    form.submit();
  });
}
(async () => {
  const sent = [];
  for (const [i, [path, body, how]] of attempts.entries()) {
    try {
      if (how === "form") {
        await sendForm(path, body, i);
      } else {
        await fetch(ui + path, {
          method: "POST", mode: "no-cors", credentials: "include",
          headers: { "Content-Type": "text/plain" },
          body: JSON.stringify(body),
        });
      }
      sent.push(how + " " + path);
    } catch (e) {
      sent.push(how + " " + path + ": " + e);
    }
  }
  document.body.dataset.sent = JSON.stringify(sent);
  document.title = "done";
})();
</script>
`;

let serve, attacker, ctx;
const requests = [];

before(async () => {
  serve = await startServe({});
  ctx = await browser(serve.tmp);
  attacker = createServer((req, res) => {
    requests.push(req.url);
    res.writeHead(200, { "Content-Type": "text/html; charset=utf-8" });
    res.end(ATTACK_PAGE);
  });
  await new Promise((ok) => attacker.listen(0, "127.0.0.1", ok));
});

after(async () => {
  await ctx?.close().catch(() => {});
  await new Promise((ok) => (attacker ? attacker.close(ok) : ok()));
  if (serve) {
    const stopped = await serve.stop();
    serve.cleanup();
    assert.equal(stopped?.code, 0, `airlock serve exit: ${JSON.stringify(stopped)}\n${serve.stderr()}`);
  }
});

/** api calls the control API the way the CLI does, with the token in a header. */
async function api(path) {
  const u = new URL(serve.url);
  const res = await fetch(u.origin + path, { headers: { Authorization: `Bearer ${u.searchParams.get("token")}` } });
  const body = await res.text();
  assert.equal(res.status, 200, `${path}: ${res.status} ${body}`);
  return JSON.parse(body);
}

test("a page on another loopback port cannot drive the API with the UI's cookie", async () => {
  const origin = new URL(serve.url).origin;
  const ui = await ctx.newPage();
  await ui.goto(serve.url); // sets the cookie, as opening the printed URL does
  assert.ok(
    (await ctx.cookies(origin)).some((c) => c.name === "airlock_token"),
    "the UI set no airlock_token cookie",
  );
  // Control: the UI's own origin gets in with the cookie alone (the page's
  // script holds the token too; this fetch does not send it).
  const own = await ui.evaluate(async () => {
    const r = await fetch("/v1/egress/rules", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ action: "allow", pattern: "own.example" }),
    });
    return r.status;
  });
  assert.equal(own, 200, "the UI's own origin could not use its cookie");

  const evil = await ctx.newPage();
  const port = attacker.address().port;
  await evil.goto(`http://127.0.0.1:${port}/attack.html?ui=${encodeURIComponent(origin)}`);
  await evil.waitForFunction(() => document.title === "done", null, { timeout: 60_000 });
  const sent = JSON.parse(await evil.evaluate(() => document.body.dataset.sent));
  assert.equal(sent.length, 4, `the attack page did not send everything: ${sent}`);
  await screenshot(evil, "crossorigin-attack");

  const settings = await api("/v1/settings");
  assert.ok(settings.allow?.includes("own.example"), `the control rule is missing: ${JSON.stringify(settings.allow)}`);
  const evilRules = (settings.allow ?? []).filter((p) => p.includes("evil.test"));
  assert.deepEqual(evilRules, [], "a page on another port added allow rules");
  const tasks = await api("/v1/tasks");
  assert.deepEqual(tasks.map((t) => t.command), [], "a page on another port started tasks");
});
