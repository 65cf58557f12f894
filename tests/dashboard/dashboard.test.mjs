// The dashboard in a real browser (issue 53): Debian's headless Chromium driven by
// playwright-core, against the real `awcp daemon` and `awcp-executor` that
// tests/tests/dashboard_browser.rs started. Every step keeps a screenshot in $SHOTS.
//
// Environment (set by the Rust test): AWCP (the awcp binary), DAEMON_URL, DAEMON_STATE,
// EXECUTOR_URL (…/awcp), EXECUTOR_TOKEN, GATE (the agent waits for $GATE/<prompt>),
// WS_APPLY, WS_DISCARD, WS_FORM, WS_CANCEL, WS_HOSTILE, SHOTS, CHROMIUM, PLAYWRIGHT (the
// playwright-core package directory).
import { execFileSync } from "node:child_process";
import { createServer } from "node:http";
import { writeFileSync, readFileSync, existsSync } from "node:fs";
import { createRequire } from "node:module";
import assert from "node:assert/strict";

const env = process.env;
const require = createRequire(import.meta.url);
const { chromium } = require(env.PLAYWRIGHT);
const daemon = env.DAEMON_URL;
const executorBase = env.EXECUTOR_URL.replace(/\/awcp$/, "");
const STEP_TIMEOUT = 90_000;

function awcp(...args) {
  const out = execFileSync(env.AWCP, ["--quiet", "--json", "--daemon-url", daemon,
    "--daemon-token-file", `${env.DAEMON_STATE}/daemon.token`, ...args], { encoding: "utf8" });
  return JSON.parse(out);
}
function delegate(ws, prompt, extra = []) {
  const v = awcp("delegate", ws, "--daemon", "--background", "--peer", env.EXECUTOR_URL, "--prompt", prompt,
    "--snapshot-mode", "staged", "--token", env.EXECUTOR_TOKEN, ...extra);
  const id = v.delegationId || v.id;
  assert.ok(id, "delegate printed an id: " + JSON.stringify(v));
  return id;
}
function release(prompt) { writeFileSync(`${env.GATE}/${prompt}`, "go"); }
function link() { return awcp("dashboard", "--no-open").url; }
let shot = 0;
async function snap(page, name) {
  shot += 1;
  const file = `${env.SHOTS}/${String(shot).padStart(2, "0")}-${name}.png`;
  await page.screenshot({ path: file, fullPage: true });
  console.log("screenshot", file);
}
function step(text) { console.log("step:", text); }

const browser = await chromium.launch({
  executablePath: env.CHROMIUM,
  // Kept off this machine's closed network (env notes): no background services, no QUIC.
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"],
});
try {
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 800 }, colorScheme: "light" });
  ctx.setDefaultTimeout(STEP_TIMEOUT);
  const page = await ctx.newPage();
  const pageErrors = [];
  page.on("pageerror", (e) => pageErrors.push(e.message));
  // Console errors but the refusals the test provokes on purpose (401s, the form's 400): a
  // CSP violation ("Refused to …") or a script error fails the test.
  page.on("console", (m) => {
    if (m.type() === "error" && !m.text().startsWith("Failed to load resource")) pageErrors.push(m.text());
  });
  page.on("dialog", (d) => d.accept());

  step("without the one-time code the dashboard shows nothing");
  let r = await page.goto(`${daemon}/ui/`);
  assert.equal(r.status(), 401);
  const locked = await page.content();
  assert.match(locked, /awcp dashboard/);
  assert.doesNotMatch(locked, /dlg_/);
  r = await page.goto(`${daemon}/ui/login`);
  assert.equal(r.status(), 401);
  r = await page.goto(`${daemon}/ui/login?code=00112233445566778899aabbccddeeff0011223344556677`);
  assert.equal(r.status(), 401);
  r = await page.goto(`${daemon}/delegations`);
  assert.equal(r.status(), 401);
  await page.goto(`${daemon}/ui/`);
  await snap(page, "locked");

  step("the one-time link signs in, once");
  const url = link();
  r = await page.goto(url);
  assert.equal(r.status(), 200);
  assert.equal(new URL(page.url()).pathname, "/ui/", "the code is not left in the address bar");
  const cookies = await ctx.cookies(daemon);
  assert.equal(cookies.length, 1);
  assert.equal(cookies[0].httpOnly, true);
  assert.equal(cookies[0].sameSite, "Strict");
  const token = readFileSync(`${env.DAEMON_STATE}/daemon.token`, "utf8").trim();
  assert.ok(!cookies[0].value.includes(token), "the cookie is not the token");
  const other = await browser.newContext();
  r = await (await other.newPage()).goto(url);
  assert.equal(r.status(), 401, "a spent link opens nothing");
  await other.close();
  await snap(page, "signed-in");

  step("a delegation started from the CLI appears and progresses without a reload");
  await page.evaluate(() => { window.__noReload = true; });
  // Its description and its agent's output carry HTML: shown as text, never run.
  const applyId = delegate(env.WS_APPLY, "apply-me", ["--description", "apply-me <b>bold</b> <img src=x onerror=\"document.title='pwned'\">"]);
  const row = page.locator(`tr[data-id="${applyId}"]`);
  await row.waitFor();
  await page.waitForFunction((id) => {
    const b = document.querySelector(`tr[data-id="${id}"] .badge`);
    return b && b.textContent === "running";
  }, applyId);
  assert.equal(await page.evaluate(() => window.__noReload), true, "the page was not reloaded");
  await snap(page, "list-running");

  step("the executor's page shows the task, its lease and its agent's output");
  const ex = await ctx.newPage();
  ex.on("pageerror", (e) => pageErrors.push(e.message));
  r = await ex.goto(`${executorBase}/ui/`);
  assert.equal(r.status(), 401);
  await ex.fill("#token", "not-the-token");
  await ex.keyboard.press("Enter");
  await ex.locator("#status.error").waitFor();
  await ex.fill("#token", env.EXECUTOR_TOKEN);
  await ex.keyboard.press("Enter");
  await ex.locator(`#t-${applyId}`).waitFor();
  await ex.locator("pre.tail", { hasText: "step 1: reading" }).waitFor();
  assert.match(await ex.locator("article.task").first().textContent(), /Lease left/);
  await ex.locator("pre.tail", { hasText: "<img src=x" }).waitFor();
  assert.equal(await ex.locator("article.task img, article.task b").count(), 0, "agent output is text");
  assert.notEqual(await ex.title(), "pwned");
  await snap(ex, "executor");
  await ex.close();

  step("its page streams the agent's lines as they arrive");
  await row.locator("a").first().click();
  await page.waitForURL(`**/ui/d/${applyId}`);
  await page.locator("#log li", { hasText: "step 1: reading" }).waitFor();
  await page.locator("#log li", { hasText: "<img src=x" }).waitFor();
  assert.match(await page.locator("h1").textContent(), /<b>bold<\/b>/);
  assert.equal(await page.locator("main img, main b").count(), 0, "descriptions and agent lines are text");
  assert.notEqual(await page.title(), "pwned");
  release("apply-me");
  await page.locator("#log li", { hasText: "step 2: writing" }).waitFor();
  await page.locator("#state .badge", { hasText: "completed" }).waitFor();
  await page.locator("a.button", { hasText: "Review diff" }).waitFor();
  await snap(page, "delegation-completed");

  step("the staged result as a file tree and a unified diff");
  await page.locator("a.button", { hasText: "Review diff" }).click();
  await page.locator("nav.tree").waitFor();
  const tree = await page.locator("nav.tree").textContent();
  for (const f of ["a.txt", "added.txt", "gone.txt", "logo.bin", "docs"]) assert.ok(tree.includes(f), `tree lists ${f}: ${tree}`);
  const fileSection = (p) => page.locator("section.file", { has: page.locator(".file-head", { hasText: p }) });
  await fileSection("workspace/a.txt").locator(".add", { hasText: "changed by the agent" }).waitFor();
  await fileSection("workspace/a.txt").locator(".del", { hasText: "lent" }).waitFor();
  assert.match(await fileSection("workspace/added.txt").locator(".badge").textContent(), /added/);
  assert.match(await fileSection("workspace/gone.txt").locator(".badge").textContent(), /removed/);
  assert.match(await fileSection("workspace/logo.bin").locator(".note").textContent(), /binary/);
  assert.match(await fileSection("workspace/docs").first().locator(".note").textContent(), /type change: directory → file/);
  await snap(page, "diff");

  step("apply with the keyboard only, then the file is on disk");
  let found = false;
  for (let i = 0; i < 30 && !found; i++) {
    await page.keyboard.press("Tab");
    found = await page.evaluate(() => document.activeElement && document.activeElement.textContent === "Apply");
  }
  assert.ok(found, "Apply is reachable with Tab");
  await page.keyboard.press("Enter");
  await page.waitForURL(`**/ui/d/${applyId}`);
  await page.locator(".badge.snap-applied").waitFor();
  assert.equal(readFileSync(`${env.WS_APPLY}/a.txt`, "utf8"), "changed by the agent\n");
  assert.equal(readFileSync(`${env.WS_APPLY}/added.txt`, "utf8"), "brand new\n");
  assert.ok(!existsSync(`${env.WS_APPLY}/gone.txt`));
  await snap(page, "applied");

  step("discard another one");
  release("discard-me");
  const discardId = delegate(env.WS_DISCARD, "discard-me");
  awcp("wait", discardId);
  await page.goto(`${daemon}/ui/d/${discardId}`);
  await page.locator("button", { hasText: "Discard" }).click();
  await page.locator(".badge.snap-discarded").waitFor();
  assert.equal(readFileSync(`${env.WS_DISCARD}/a.txt`, "utf8"), "lent\n");
  assert.ok(!existsSync(`${env.WS_DISCARD}/added.txt`));
  await snap(page, "discarded");

  step("start a delegation from the form");
  await page.goto(`${daemon}/ui/new`);
  await page.fill("#workspace", env.WS_FORM);
  await page.fill("#executor", env.EXECUTOR_URL);
  await page.fill("#prompt", "from-form");
  await page.locator("button[type=submit]").click();
  // Without the executor's token the daemon's refusal is shown on the page.
  await page.locator("#status.error").waitFor();
  await snap(page, "form-refused");
  await page.fill("#token", env.EXECUTOR_TOKEN);
  await snap(page, "form");
  release("from-form");
  await page.locator("button[type=submit]").click();
  await page.waitForURL(/\/ui\/d\/dlg_/);
  await page.locator("#state .badge", { hasText: "completed" }).waitFor();
  await page.locator("a.button", { hasText: "Review diff" }).waitFor();
  await snap(page, "form-delegation");
  await page.locator("button", { hasText: "Apply" }).click();
  await page.locator(".badge.snap-applied").waitFor();
  assert.equal(readFileSync(`${env.WS_FORM}/a.txt`, "utf8"), "changed by the agent\n");

  step("cancel a running delegation");
  const cancelId = delegate(env.WS_CANCEL, "cancel-me");
  await page.goto(`${daemon}/ui/d/${cancelId}`);
  await page.locator("#log li", { hasText: "step 1: reading" }).waitFor();
  await page.locator("button", { hasText: "Cancel delegation" }).click();
  await page.locator("#state .badge", { hasText: "cancelled" }).waitFor();
  await snap(page, "cancelled");

  step("a page of another origin cannot trigger anything, cookie or not");
  release("hostile");
  const hostileId = delegate(env.WS_HOSTILE, "hostile");
  const hostile = awcp("wait", hostileId);
  const sid = hostile.snapshots.find((s) => s.status === "pending").id;
  const before = awcp("list").delegations.length;
  const target = `${daemon}/delegation/${hostileId}/snapshots/${sid}/apply`;
  const evil = createServer((req, res) => {
    res.setHeader("content-type", "text/html");
    if (req.url === "/form") {
      res.end(`<form id=f method=post action="${target}"><input name=x value=1></form>` +
        `<script>document.getElementById('f').submit()</script>`);
      return;
    }
    res.end(`<!doctype html><title>evil</title><pre id=out></pre><iframe name=fr src="/form"></iframe><script>
      const out = document.getElementById('out'); const log = (t) => out.textContent += t + "\\n";
      (async () => {
        const tries = [
          ["apply (no-cors)", () => fetch(${JSON.stringify(target)}, {method: "POST", mode: "no-cors", credentials: "include"})],
          ["apply (cors)", () => fetch(${JSON.stringify(target)}, {method: "POST", credentials: "include"})],
          ["delegate text/plain", () => fetch(${JSON.stringify(daemon + "/delegate")}, {method: "POST", mode: "no-cors", credentials: "include",
             headers: {"content-type": "text/plain"}, body: JSON.stringify({executorUrl: ${JSON.stringify(env.EXECUTOR_URL)},
             environment: {resources: [{name: "w", type: "fs", source: "/"}]}, task: {description: "x", prompt: "x"}})})],
          ["cancel", () => fetch(${JSON.stringify(daemon + "/delegation/" + hostileId)}, {method: "DELETE", credentials: "include"})],
          ["read list", async () => { const r = await fetch(${JSON.stringify(daemon + "/delegations")}, {credentials: "include"}); return r.text(); }],
          ["login code", () => fetch(${JSON.stringify(daemon + "/ui/code")}, {method: "POST", mode: "no-cors", credentials: "include"})],
        ];
        for (const [name, f] of tries) {
          try { const v = await f(); log(name + ": sent, " + (typeof v === "string" ? "READ " + v.slice(0, 40) : "opaque " + (v && v.type))); }
          catch (e) { log(name + ": blocked (" + e.message + ")"); }
        }
        setTimeout(() => { document.title = "done"; }, 1500);
      })();
    </script>`);
  });
  await new Promise((ok) => evil.listen(0, "127.0.0.1", ok));
  const evilUrl = `http://127.0.0.1:${evil.address().port}/`;
  const ep = await ctx.newPage();
  await ep.goto(evilUrl);
  await ep.waitForFunction(() => document.title === "done");
  const report = await ep.locator("#out").textContent();
  console.log(report);
  assert.doesNotMatch(report, /READ/, "a foreign page read the daemon's answer");
  await snap(ep, "cross-origin");
  await ep.close();
  evil.close();
  const after = awcp("snapshots", hostileId).snapshots.find((s) => s.id === sid);
  assert.equal(after.status, "pending", "the foreign page's apply did nothing");
  assert.equal(readFileSync(`${env.WS_HOSTILE}/a.txt`, "utf8"), "lent\n");
  assert.equal(awcp("list").delegations.length, before, "no delegation was started");
  assert.equal(awcp("status", hostileId).state, "completed");

  step("phone width and dark mode");
  const phone = await browser.newContext({ viewport: { width: 390, height: 844 }, colorScheme: "dark", isMobile: true });
  const pp = await phone.newPage();
  await pp.goto(link());
  await pp.locator("table.delegations").waitFor();
  const overflow = await pp.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflow <= 1, `no sideways scrolling at phone width (overflows by ${overflow}px)`);
  await snap(pp, "phone-dark-list");
  await pp.goto(`${daemon}/ui/d/${hostileId}/s/${sid}`);
  await pp.locator("nav.tree").waitFor();
  await snap(pp, "phone-dark-diff");
  await phone.close();

  step("a result applied from the CLI shows on the open page without a reload");
  await page.goto(`${daemon}/ui/d/${hostileId}`);
  await page.locator(".badge.snap-pending").waitFor();
  await page.evaluate(() => { window.__noReload = true; });
  awcp("apply", hostileId, sid);
  await page.locator(".badge.snap-applied").waitFor();
  assert.equal(await page.evaluate(() => window.__noReload), true, "the page was not reloaded");
  assert.equal(readFileSync(`${env.WS_HOSTILE}/a.txt`, "utf8"), "changed by the agent\n");
  await snap(page, "applied-from-cli");

  assert.deepEqual(pageErrors, [], "no script errors and no refused resources (CSP) on any page");
  console.log("dashboard browser test: all steps passed");
} finally {
  await browser.close();
}
