// A second real MCP client: the official TypeScript SDK (the one most MCP
// clients are built on) drives the real `dsh mcp` over stdio. Every result
// is parsed by the SDK's own schemas, so a tool list, result or
// notification it rejects fails this script (exit status 1).
//
// Usage: DSH_BIN=path/to/dsh PROJECT=dir node mcp_client.mjs
// DSH_MCP_ARGS (a JSON array) adds arguments to `dsh mcp`, such as
// ["--remote", "ssh://host/dir"]: the session's directory is then the one
// the target names on the far side, and PROJECT only where the bridge runs.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import assert from "node:assert/strict";

const dsh = process.env.DSH_BIN;
const project = process.env.PROJECT;
assert.ok(dsh && project, "set DSH_BIN and PROJECT");

const transport = new StdioClientTransport({
  command: dsh,
  args: ["mcp", ...JSON.parse(process.env.DSH_MCP_ARGS ?? "[]")],
  cwd: project,
  env: { ...process.env, DSH_LOG: "warn" },
  stderr: "inherit",
});
const client = new Client({ name: "dsh-ts-sdk-test", version: "1.0.0" });
await client.connect(transport);

function ok(result, what) {
  const text = result.content.map((c) => c.text).join("");
  assert.equal(result.isError ?? false, false, `${what}: ${text}`);
  assert.equal(typeof result.structuredContent, "object", `${what}: no structuredContent`);
  return result.structuredContent;
}

// tools/list
const { tools } = await client.listTools();
const names = tools.map((t) => t.name);
for (const name of ["bash", "terminal_open", "terminal_send", "terminal_close", "lsp", "job_output"]) {
  assert.ok(names.includes(name), `tools/list lacks ${name}: ${names}`);
}
for (const t of tools) {
  assert.equal(t.inputSchema.type, "object", `${t.name}: input schema`);
}
console.log(`tools/list: ${names.length} tools`);

// bash, with progress notifications (the SDK sends a progressToken when
// onprogress is given)
const progress = [];
const bash = ok(
  await client.callTool(
    { name: "bash", arguments: { command: "echo start; sleep 3; echo done" } },
    undefined,
    { onprogress: (p) => progress.push(p), timeout: 60000 },
  ),
  "bash",
);
assert.equal(bash.exit_code, 0);
assert.equal(bash.output, "start\ndone\n");
assert.ok(progress.length >= 1, "no progress notification during a 3 s bash");
assert.match(progress[0].message, /running for \d+ s; last output: start/);
console.log(`bash: exit ${bash.exit_code}, ${progress.length} progress notifications`);

// a Python terminal: open, send, close
const opened = ok(
  await client.callTool({ name: "terminal_open", arguments: { command: ["python3", "-q", "-i"] } }),
  "terminal_open",
);
const sent = ok(
  await client.callTool({ name: "terminal_send", arguments: { id: opened.id, text: "x = 6 * 7" } }),
  "terminal_send",
);
assert.equal(sent.reason, "input_wait");
const again = ok(
  await client.callTool({ name: "terminal_send", arguments: { id: opened.id, text: "print(x)" } }),
  "terminal_send",
);
assert.match(again.output, /^42\r?\n/);
const closed = ok(
  await client.callTool({ name: "terminal_close", arguments: { id: opened.id } }),
  "terminal_close",
);
assert.equal(closed.outcome, "closed");
console.log(`terminal: ${opened.id} answered 42, closed`);

// lsp: the outline of a Python file (pyright), retrying while the server
// reports LSP_NOT_READY; any other error fails
const deadline = Date.now() + 180000;
let outline;
for (;;) {
  const r = await client.callTool(
    { name: "lsp", arguments: { op: "symbols", path: "shapes.py" } },
    undefined,
    { timeout: 120000 },
  );
  if (!r.isError) {
    outline = r.structuredContent;
    break;
  }
  assert.equal(r.structuredContent.error.code, "LSP_NOT_READY", r.content[0].text);
  assert.ok(Date.now() < deadline, "the language server never became ready");
}
const kinds = Object.fromEntries(outline.symbols.map((s) => [s.name, s.kind]));
assert.equal(kinds.Circle, "class");
assert.equal(kinds.total_area, "function");
console.log(`lsp: ${outline.symbols.length} symbols in shapes.py`);

// an error keeps the contract's envelope
const bad = await client.callTool({ name: "lsp", arguments: { op: "nope", path: "x.py" } });
assert.equal(bad.isError, true);
assert.equal(bad.structuredContent.error.code, "INVALID_ARGUMENT");

await client.close();
console.log("typescript sdk client: ok");
