// A real browser for the end-to-end tests of `dsh ui`: Debian's Chromium
// (never a browser that a tool downloads), driven by playwright-core and
// steered by the Python test one JSON command per line on stdin; each
// answer is one JSON line on stdout: {"ok": true, ...} or {"ok": false,
// "error": "..."}.
//
// Usage: node ui_browser.mjs USER_DATA_DIR
//
// Commands: {"op": "goto", "url"} · {"op": "wait_text", "text",
// "selector"?, "timeout_ms"?} (answers with the milliseconds it waited) ·
// {"op": "wait_selector", "selector", "timeout_ms"?} · {"op": "click",
// "selector"} · {"op": "type", "text"} · {"op": "press", "key"} ·
// {"op": "text", "selector"} · {"op": "attr", "selector", "name"} ·
// {"op": "screenshot", "path"} · {"op": "url"} · {"op": "fill",
// "selector", "text"} · {"op": "focus", "selector"} · {"op": "drag",
// "source", "target", "where": "above"|"below"} (a real drag: the mouse
// from the source to the upper or lower part of the target) · {"op":
// "attrs", "selector", "name"} (the attribute of every match, in order) ·
// {"op": "wait_attrs", "selector", "name", "values", "timeout_ms"?} ·
// {"op": "eval", "script"} (an expression, awaited; its JSON value) ·
// {"op": "open_tab"} (another page in the same browser; answers its
// number) · {"op": "close"}. Every command but close takes "tab" (0 by
// default).

import { createInterface } from "node:readline";
import { chromium } from "playwright-core";

const CHROMIUM = process.env.DSH_TEST_CHROMIUM || "/usr/bin/chromium";
const FLAGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

const userDataDir = process.argv[2];
if (!userDataDir) {
  process.stderr.write("usage: node ui_browser.mjs USER_DATA_DIR\n");
  process.exit(2);
}

// A fresh profile in the test's own directory (Playwright passes it as
// --user-data-dir); no download, no update, no sync.
const context = await chromium.launchPersistentContext(userDataDir, {
  executablePath: CHROMIUM,
  headless: true,
  args: FLAGS,
  viewport: { width: 1280, height: 860 },
});
const consoleErrors = [];
function watch(page) {
  page.on("console", (m) => {
    if (m.type() === "error") consoleErrors.push(m.text());
  });
  page.on("pageerror", (e) => consoleErrors.push(String(e)));
  page.on("response", (r) => {
    if (r.status() >= 400) consoleErrors.push(`${r.status()} ${r.url()}`);
  });
  return page;
}
const tabs = [watch(context.pages()[0] || (await context.newPage()))];

const DEFAULT_TIMEOUT = 20000;

async function run(cmd) {
  const timeout = cmd.timeout_ms || DEFAULT_TIMEOUT;
  const page = tabs[cmd.tab || 0];
  if (!page) throw new Error(`no tab ${cmd.tab}`);
  switch (cmd.op) {
    case "goto": {
      const r = await page.goto(cmd.url, { waitUntil: "load", timeout });
      return { status: r ? r.status() : null, url: page.url() };
    }
    case "wait_text": {
      const began = Date.now();
      await page.waitForFunction(
        ([sel, text]) => {
          const el = document.querySelector(sel);
          return el !== null && el.innerText.includes(text);
        },
        [cmd.selector || "body", cmd.text],
        { timeout, polling: "raf" },
      );
      return { waited_ms: Date.now() - began };
    }
    case "wait_selector": {
      await page.waitForSelector(cmd.selector, { timeout, state: "attached" });
      return {};
    }
    case "click": {
      await page.click(cmd.selector, { timeout });
      return {};
    }
    case "type": {
      await page.keyboard.type(cmd.text);
      return {};
    }
    case "press": {
      await page.keyboard.press(cmd.key);
      return {};
    }
    case "text": {
      return { text: await page.innerText(cmd.selector, { timeout }) };
    }
    case "attr": {
      return { value: await page.getAttribute(cmd.selector, cmd.name, { timeout }) };
    }
    case "screenshot": {
      await page.screenshot({ path: cmd.path, fullPage: true });
      return {};
    }
    case "url": {
      return { url: page.url(), console_errors: consoleErrors };
    }
    case "fill": {
      await page.fill(cmd.selector, cmd.text, { timeout });
      return {};
    }
    case "focus": {
      await page.focus(cmd.selector, { timeout });
      return {};
    }
    case "drag": {
      const target = page.locator(cmd.target);
      const box = await target.boundingBox({ timeout });
      if (!box) throw new Error(`${cmd.target} is not shown`);
      const y = cmd.where === "below" ? box.height - 4 : 4;
      await page.locator(cmd.source).dragTo(target, { targetPosition: { x: 40, y }, timeout });
      return {};
    }
    case "attrs": {
      const values = await page.$$eval(
        cmd.selector,
        (els, name) => els.map((el) => el.getAttribute(name)),
        cmd.name,
      );
      return { values };
    }
    case "wait_attrs": {
      await page.waitForFunction(
        ([sel, name, want]) =>
          JSON.stringify([...document.querySelectorAll(sel)].map((el) => el.getAttribute(name))) ===
          JSON.stringify(want),
        [cmd.selector, cmd.name, cmd.values],
        { timeout, polling: 50 },
      );
      return {};
    }
    case "eval": {
      return { value: await page.evaluate(cmd.script) };
    }
    case "open_tab": {
      tabs.push(watch(await context.newPage()));
      return { tab: tabs.length - 1 };
    }
    default:
      throw new Error(`unknown op ${JSON.stringify(cmd.op)}`);
  }
}

const lines = createInterface({ input: process.stdin });
process.stdout.write(JSON.stringify({ ok: true, ready: true, version: context.browser()?.version() ?? null }) + "\n");
for await (const line of lines) {
  if (!line.trim()) continue;
  const cmd = JSON.parse(line);
  if (cmd.op === "close") break;
  let answer;
  try {
    answer = { ok: true, ...(await run(cmd)) };
  } catch (e) {
    const page = tabs[cmd.tab || 0] || tabs[0];
    let seen = "";
    try {
      seen = (await page.innerText("body", { timeout: 1000 })).slice(0, 3000);
    } catch (_) {
      // the page may be gone
    }
    answer = { ok: false, error: String(e && e.message ? e.message : e), url: page.url(), page: seen };
  }
  process.stdout.write(JSON.stringify(answer) + "\n");
}
await context.close();
process.stdout.write(JSON.stringify({ ok: true, closed: true }) + "\n");
