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
// {"op": "screenshot", "path"} · {"op": "url"} · {"op": "close"}.

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
const page = context.pages()[0] || (await context.newPage());
const consoleErrors = [];
page.on("console", (m) => {
  if (m.type() === "error") consoleErrors.push(m.text());
});
page.on("pageerror", (e) => consoleErrors.push(String(e)));
page.on("response", (r) => {
  if (r.status() >= 400) consoleErrors.push(`${r.status()} ${r.url()}`);
});

const DEFAULT_TIMEOUT = 20000;

async function run(cmd) {
  const timeout = cmd.timeout_ms || DEFAULT_TIMEOUT;
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
