// Resume through the official TypeScript SDK: a client opens a Python
// REPL with state and starts a job printing a line a second; its `dsh mcp`
// bridge is SIGKILLed mid-send; a new client takes everything back with
// the resume key from the first client's replies.
//
// Usage: DSH_BIN=path/to/dsh PROJECT=dir node resume_client.mjs
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import assert from "node:assert/strict";

const dsh = process.env.DSH_BIN;
const project = process.env.PROJECT;
assert.ok(dsh && project, "set DSH_BIN and PROJECT");

async function connect(name) {
  const transport = new StdioClientTransport({
    command: dsh,
    args: ["mcp"],
    cwd: project,
    env: { ...process.env, DSH_LOG: "warn" },
    stderr: "inherit",
  });
  const client = new Client({ name, version: "1.0.0" });
  await client.connect(transport);
  return { client, transport };
}

function ok(result, what) {
  const text = result.content.map((c) => c.text).join("");
  assert.equal(result.isError ?? false, false, `${what}: ${text}`);
  return result.structuredContent;
}

const first = await connect("dsh-ts-resume-1");
const repl = ok(
  await first.client.callTool({ name: "terminal_open", arguments: { command: ["python3", "-q"] } }),
  "terminal_open",
);
const key = repl.resume_key;
assert.match(key, /^dsh-rk-[0-9a-f]{32}$/);
ok(await first.client.callTool({ name: "terminal_send", arguments: { id: repl.id, text: "x = 6 * 7" } }), "send");
const job = ok(
  await first.client.callTool({
    name: "bash",
    arguments: { command: "for i in $(seq 1 100000); do echo tick $i; sleep 1; done", run_in_background: true },
  }),
  "bash",
);
// Each reply that starts work gives the agent a new key (each shown once);
// the last one takes the work back.
assert.match(job.resume_key, /^dsh-rk-[0-9a-f]{32}$/);
assert.notEqual(job.resume_key, key);
const latest = job.resume_key;
// A send under way when the bridge dies.
const pending = first.client
  .callTool({ name: "terminal_send", arguments: { id: repl.id, text: "import time; time.sleep(2); print('slept', x)" } })
  .catch(() => "the client went away");
for (let tries = 0; ; tries++) {
  assert.ok(tries < 10000, "the send never showed as under way");
  const listed = ok(await first.client.callTool({ name: "terminal_list", arguments: {} }), "list");
  if (listed.terminals.some((t) => t.active_send)) break;
}
process.kill(first.transport.pid, "SIGKILL");
await pending;
console.log(`killed the bridge of the first client (pid ${first.transport.pid})`);

const second = await connect("dsh-ts-resume-2");
const back = ok(
  await second.client.callTool({ name: "terminal_list", arguments: { resume: latest } }),
  "terminal_list resume",
);
assert.deepEqual(back.terminals.map((t) => t.id), [repl.id]);
const again = ok(
  await second.client.callTool({ name: "terminal_send", arguments: { id: repl.id, text: "print(x)" } }),
  "terminal_send",
);
assert.match(again.output, /42/);
const read = ok(
  await second.client.callTool({ name: "terminal_read", arguments: { id: repl.id, since: 0 } }),
  "terminal_read",
);
assert.match(read.output, /slept 42/);
const out = ok(
  await second.client.callTool({
    name: "job_output",
    arguments: { job_id: job.job_id, since: 0, wait_ms: 3000, max_bytes: 100000 },
  }),
  "job_output",
);
const ticks = [...out.output.matchAll(/^tick (\d+)$/gm)].map((m) => Number(m[1]));
assert.ok(ticks.length >= 1, out.output);
ticks.forEach((n, i) => assert.equal(n, i + 1, `a tick is missing: ${ticks}`));
// A key is used once: the one that took the work back takes nothing again.
const reused = await second.client.callTool({ name: "terminal_list", arguments: { resume: latest } });
assert.equal(reused.isError, true, "a used key was taken again");
ok(await second.client.callTool({ name: "job_kill", arguments: { job_id: job.job_id } }), "job_kill");
ok(await second.client.callTool({ name: "terminal_close", arguments: { id: repl.id } }), "terminal_close");
await second.client.close();
console.log(`resumed ${repl.id} (x = 42) and ${job.job_id} (${ticks.length} ticks, none lost)`);
console.log("typescript sdk resume: ok");
