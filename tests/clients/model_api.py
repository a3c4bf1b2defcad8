"""A scripted stand-in for the model APIs of three agent CLIs, on loopback.

It speaks, streamed as server-sent events:

* the Anthropic Messages API (`POST /v1/messages`), for Claude Code;
* the OpenAI Responses API (`POST …/responses`), for Codex;
* Gemini's `generateContent` / `streamGenerateContent`, for Gemini CLI.

A script is an ordered list of tool calls, `{"tool": NAME, "arguments":
{...}}` with NAME the MCP tool's own name, that the "model" makes one per
turn, then a final text answer. Each client names MCP tools in its own way
(`mcp__dsh__bash`, `dsh__bash`, `bash`, …): the name the model uses is found
in the tool list the client sends with the request.

Which call comes next is read from the conversation the client sends, not
kept here: the number of scripted calls already in its history is the step.
A retried request therefore gets the same answer.

Every request is logged as one JSON line (time, path, headers, body, and
what was answered), so a test can read exactly what the model was shown:
the tool list as each client rewrote it, and each tool result as it came
back in the next request. Requests that are not turns of the scripted
conversation (token counting, model lists, side questions, telemetry) get a
harmless answer.

Run alone for manual use: `python3 model_api.py SCRIPT.json LOG.jsonl`
prints the port and serves until interrupted.
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CALL_PREFIX = "call_dsh_"
FINAL_TEXT = "All scripted calls are done."


def call_id(step: int) -> str:
    return f"{CALL_PREFIX}{step}"


def step_of(call: str | None) -> int | None:
    if isinstance(call, str) and call.startswith(CALL_PREFIX):
        try:
            return int(call[len(CALL_PREFIX):])
        except ValueError:
            return None
    return None


def match_tool(offered: list[str], mcp_name: str, server: str = "dsh") -> str | None:
    """The name under which a client offers MCP tool `mcp_name` of
    `server`: the one that carries the server's name and ends with the
    tool's name, else the tool's own name."""
    tagged = [
        n for n in offered
        if server in n and (n.endswith("__" + mcp_name) or n.endswith("_" + mcp_name)
                            or n.endswith("." + mcp_name) or n.endswith("/" + mcp_name))
    ]
    # prefer the shortest tagged name (`dsh__job_list` before `dsh__x_job_list`)
    tagged.sort(key=len)
    if tagged:
        return tagged[0]
    if mcp_name in offered:
        return mcp_name
    return None


class Script:
    def __init__(self, calls: list[dict], final_text: str = FINAL_TEXT):
        self.calls = calls
        self.final_text = final_text


class Log:
    def __init__(self, path: str):
        self.path = path
        self.lock = threading.Lock()
        self.seq = 0
        open(path, "w").close()

    def write(self, record: dict) -> None:
        with self.lock:
            self.seq += 1
            record = {"seq": self.seq, **record}
            with open(self.path, "a") as f:
                f.write(json.dumps(record) + "\n")


# ---------------------------------------------------------------- Anthropic


def anthropic_tool_names(body: dict) -> list[str]:
    return [t.get("name") for t in body.get("tools") or [] if isinstance(t, dict) and t.get("name")]


def anthropic_steps_done(body: dict) -> int:
    done = 0
    for m in body.get("messages") or []:
        if m.get("role") != "assistant" or not isinstance(m.get("content"), list):
            continue
        for block in m["content"]:
            if block.get("type") == "tool_use" and step_of(block.get("id")) is not None:
                done = max(done, step_of(block["id"]) + 1)
    return done


SEARCH_TOOL = "ToolSearch"
SEARCH_ID = "call_search_0"


def anthropic_searched(body: dict) -> bool:
    for m in body.get("messages") or []:
        if m.get("role") == "assistant" and isinstance(m.get("content"), list):
            if any(b.get("type") == "tool_use" and b.get("id") == SEARCH_ID for b in m["content"]):
                return True
    return False


def anthropic_events(model: str, blocks: list[dict], stop_reason: str):
    yield "message_start", {
        "type": "message_start",
        "message": {
            "id": f"msg_{time.monotonic_ns()}", "type": "message", "role": "assistant",
            "model": model, "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 1,
                      "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
        },
    }
    for i, block in enumerate(blocks):
        if block["type"] == "text":
            yield "content_block_start", {"type": "content_block_start", "index": i,
                                          "content_block": {"type": "text", "text": ""}}
            yield "content_block_delta", {"type": "content_block_delta", "index": i,
                                          "delta": {"type": "text_delta", "text": block["text"]}}
        else:
            yield "content_block_start", {"type": "content_block_start", "index": i,
                                          "content_block": {"type": "tool_use", "id": block["id"],
                                                            "name": block["name"], "input": {}}}
            yield "content_block_delta", {"type": "content_block_delta", "index": i,
                                          "delta": {"type": "input_json_delta",
                                                    "partial_json": json.dumps(block["input"])}}
        yield "content_block_stop", {"type": "content_block_stop", "index": i}
    yield "message_delta", {"type": "message_delta",
                            "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                            "usage": {"output_tokens": 5}}
    yield "message_stop", {"type": "message_stop"}


# ----------------------------------------------------------------- Responses


def responses_tool_names(body: dict) -> list[str]:
    names = []
    for t in body.get("tools") or []:
        if not isinstance(t, dict):
            continue
        if t.get("name") and t.get("type") != "namespace":
            names.append(t["name"])
        # a namespace of tools (Codex groups each MCP server's tools in
        # one): offered as NAMESPACE/NAME, called with a `namespace` field
        for inner in t.get("tools") or []:
            if isinstance(inner, dict) and inner.get("name"):
                names.append(f"{t.get('name')}/{inner['name']}")
    return names


def responses_steps_done(body: dict) -> int:
    done = 0
    items = body.get("input")
    if not isinstance(items, list):
        return 0
    for item in items:
        if item.get("type") in ("function_call", "custom_tool_call") and step_of(item.get("call_id")) is not None:
            done = max(done, step_of(item["call_id"]) + 1)
    return done


def responses_events(model: str, items: list[dict]):
    rid = f"resp_{time.monotonic_ns()}"
    base = {"id": rid, "object": "response", "created_at": int(time.time()), "model": model,
            "status": "in_progress", "output": []}
    yield "response.created", {"type": "response.created", "response": base}
    for i, item in enumerate(items):
        yield "response.output_item.added", {"type": "response.output_item.added",
                                             "output_index": i, "item": item}
        if item["type"] == "message":
            text = item["content"][0]["text"]
            yield "response.output_text.delta", {"type": "response.output_text.delta",
                                                 "item_id": item["id"], "output_index": i,
                                                 "content_index": 0, "delta": text}
        yield "response.output_item.done", {"type": "response.output_item.done",
                                            "output_index": i, "item": item}
    done = dict(base, status="completed", output=items,
                usage={"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
                       "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0},
                       "total_tokens": 15})
    yield "response.completed", {"type": "response.completed", "response": done}


# -------------------------------------------------------------------- Gemini


def gemini_tool_names(body: dict) -> list[str]:
    names = []
    for t in body.get("tools") or []:
        for decl in (t or {}).get("functionDeclarations") or []:
            if decl.get("name"):
                names.append(decl["name"])
    return names


def gemini_steps_done(body: dict) -> int:
    """Gemini's history carries calls by name and arguments, and by id when
    the client keeps the one the model sent."""
    done = 0
    count = 0
    for c in body.get("contents") or []:
        if c.get("role") != "model":
            continue
        for part in c.get("parts") or []:
            fc = part.get("functionCall")
            if not fc:
                continue
            s = step_of(fc.get("id"))
            if s is not None:
                done = max(done, s + 1)
            elif fc.get("name"):
                count += 1
    return max(done, count)


def sample_of(schema: dict):
    """A small value of a JSON schema (Gemini's upper-case types too), for
    the client's side questions that want JSON (its model router)."""
    kind = str(schema.get("type", "object")).lower()
    if schema.get("enum"):
        return schema["enum"][0]
    if kind == "object":
        props = schema.get("properties") or {}
        return {k: sample_of(v) for k, v in props.items()}
    if kind == "array":
        return []
    if kind in ("integer", "number"):
        return 1
    if kind == "boolean":
        return False
    return "ok"


def gemini_chunk(parts: list[dict], model: str) -> dict:
    return {
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15},
        "modelVersion": model,
    }


# -------------------------------------------------------------------- server


class ModelApi:
    """The server; `start()` serves on a thread, `stop()` ends it."""

    def __init__(self, script: Script, log_path: str, server_name: str = "dsh"):
        self.script = script
        self.log = Log(log_path)
        self.server_name = server_name
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def do_GET(self):
                api.handle(self, None)

            def do_HEAD(self):
                api.handle(self, None)

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                if not length and self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    raw = read_chunked(self.rfile)
                api.handle(self, raw)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def start(self) -> "ModelApi":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    # --- dispatch

    def handle(self, h: BaseHTTPRequestHandler, raw: bytes | None) -> None:
        t = time.time()
        parsed = urllib.parse.urlsplit(h.path)
        path = parsed.path
        body = None
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                body = {"_raw": raw.decode(errors="replace")[:10000]}
        record = {"t": t, "method": h.command, "path": h.path,
                  "headers": {k.lower(): v for k, v in h.headers.items()
                              if k.lower() not in ("authorization", "x-api-key", "x-goog-api-key")},
                  "body": body}
        try:
            if h.command == "POST" and path.endswith("/messages/count_tokens"):
                record["kind"] = "aux"
                self.json(h, {"input_tokens": 10})
            elif h.command == "POST" and path.endswith("/messages"):
                self.anthropic(h, body or {}, record)
            elif h.command == "POST" and path.endswith("/responses"):
                self.responses(h, body or {}, record)
            elif h.command == "POST" and ":" in path.rsplit("/", 1)[-1]:
                self.gemini(h, body or {}, path, record)
            elif h.command == "GET" and path.rstrip("/").endswith("/models"):
                record["kind"] = "aux"
                self.json(h, {"object": "list", "data": [], "models": []})
            else:
                record["kind"] = "other"
                self.json(h, {})
        finally:
            record["t_end"] = time.time()
            self.log.write(record)

    def next_call(self, offered: list[str], done: int, record: dict):
        """The scripted call at step `done` as (step, client-side name,
        arguments), or None when the script is over."""
        if done >= len(self.script.calls):
            record["answer"] = {"final": self.script.final_text}
            return None
        call = self.script.calls[done]
        name = match_tool(offered, call["tool"], self.server_name)
        record["answer"] = {"step": done, "tool": call["tool"], "name": name,
                            "arguments": call.get("arguments", {})}
        if name is None:
            record["answer"]["error"] = f"no tool for {call['tool']} among {offered}"
            return None
        return done, name, call.get("arguments", {})

    def is_conversation(self, offered: list[str]) -> bool:
        return any(match_tool(offered, c["tool"], self.server_name) for c in self.script.calls) or (
            not self.script.calls and bool(offered))

    # --- Anthropic

    def anthropic(self, h, body: dict, record: dict) -> None:
        model = body.get("model", "claude")
        offered = anthropic_tool_names(body)
        record["offered"] = offered
        # Claude Code defers MCP tools: only their names are listed, in a
        # message, until the model loads their schemas with ToolSearch.
        deferred = []
        if SEARCH_TOOL in offered:
            deferred = sorted(set(re.findall(
                r"mcp__%s__[A-Za-z0-9_-]+" % re.escape(self.server_name), json.dumps(body)
            )) - set(offered))
            record["deferred"] = deferred
        searched = anthropic_searched(body)
        if not self.is_conversation(offered + deferred):
            record["kind"] = "aux"
            blocks, stop = [{"type": "text", "text": "ok"}], "end_turn"
        elif deferred and not searched and self.script.calls:
            # load every scripted tool first, as a model does
            record["kind"] = "turn"
            names = [match_tool(deferred, c["tool"], self.server_name) for c in self.script.calls]
            query = "select:" + ",".join(dict.fromkeys(n for n in names if n))
            record["answer"] = {"search": query}
            blocks, stop = [{"type": "tool_use", "id": SEARCH_ID, "name": SEARCH_TOOL,
                             "input": {"query": query}}], "tool_use"
        else:
            record["kind"] = "turn"
            nxt = self.next_call(offered + deferred, anthropic_steps_done(body), record)
            if nxt is None:
                blocks, stop = [{"type": "text", "text": self.script.final_text}], "end_turn"
            else:
                step, name, args = nxt
                blocks, stop = [{"type": "tool_use", "id": call_id(step), "name": name, "input": args}], "tool_use"
        if body.get("stream"):
            self.sse(h, anthropic_events(model, blocks, stop), named=True)
        else:
            content = [dict(b) if b["type"] == "text" else
                       {"type": "tool_use", "id": b["id"], "name": b["name"], "input": b["input"]}
                       for b in blocks]
            self.json(h, {"id": f"msg_{time.monotonic_ns()}", "type": "message", "role": "assistant",
                          "model": model, "content": content, "stop_reason": stop, "stop_sequence": None,
                          "usage": {"input_tokens": 10, "output_tokens": 5}})

    # --- Responses

    def responses(self, h, body: dict, record: dict) -> None:
        model = body.get("model", "gpt")
        offered = responses_tool_names(body)
        record["offered"] = offered
        text_item = {"type": "message", "role": "assistant", "id": f"msg_{time.monotonic_ns()}",
                     "status": "completed",
                     "content": [{"type": "output_text", "text": "ok", "annotations": []}]}
        if not self.is_conversation(offered):
            record["kind"] = "aux"
            items = [text_item]
        else:
            record["kind"] = "turn"
            nxt = self.next_call(offered, responses_steps_done(body), record)
            if nxt is None:
                text_item["content"][0]["text"] = self.script.final_text
                items = [text_item]
            else:
                step, name, args = nxt
                item = {"type": "function_call", "id": f"fc_{step}", "call_id": call_id(step),
                        "name": name, "arguments": json.dumps(args), "status": "completed"}
                if "/" in name:
                    item["namespace"], item["name"] = name.rsplit("/", 1)
                items = [item]
        if body.get("stream", True):
            self.sse(h, responses_events(model, items), named=True)
        else:
            self.json(h, {"id": f"resp_{time.monotonic_ns()}", "object": "response", "status": "completed",
                          "model": model, "output": items,
                          "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}})

    # --- Gemini

    def gemini(self, h, body: dict, path: str, record: dict) -> None:
        model_part, method = path.rsplit("/", 1)[-1].split(":", 1)
        if method == "countTokens":
            record["kind"] = "aux"
            self.json(h, {"totalTokens": 10})
            return
        if method not in ("generateContent", "streamGenerateContent"):
            record["kind"] = "aux"
            self.json(h, {})
            return
        offered = gemini_tool_names(body)
        record["offered"] = offered
        if not self.is_conversation(offered):
            record["kind"] = "aux"
            gc = body.get("generationConfig") or {}
            text = "ok"
            if gc.get("responseMimeType") == "application/json":
                text = json.dumps(sample_of(gc.get("responseJsonSchema") or gc.get("responseSchema") or {}))
            parts = [{"text": text}]
        else:
            record["kind"] = "turn"
            nxt = self.next_call(offered, gemini_steps_done(body), record)
            if nxt is None:
                parts = [{"text": self.script.final_text}]
            else:
                step, name, args = nxt
                parts = [{"functionCall": {"id": call_id(step), "name": name, "args": args}}]
        chunk = gemini_chunk(parts, model_part)
        if method == "streamGenerateContent":
            self.sse(h, iter([(None, chunk)]), named=False)
        else:
            self.json(h, chunk)

    # --- wire

    def json(self, h, obj, status: int = 200) -> None:
        data = json.dumps(obj).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)
        h.wfile.flush()

    def sse(self, h, events, named: bool) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Cache-Control", "no-cache")
        h.send_header("Connection", "close")
        h.end_headers()
        for name, data in events:
            frame = ""
            if named and name:
                frame += f"event: {name}\n"
            frame += f"data: {json.dumps(data)}\n\n"
            h.wfile.write(frame.encode())
        h.wfile.flush()
        h.close_connection = True


def read_chunked(rfile) -> bytes:
    out = b""
    while True:
        size = int(rfile.readline().strip().split(b";")[0], 16)
        if size == 0:
            rfile.readline()
            return out
        out += rfile.read(size)
        rfile.readline()


def main(argv: list[str]) -> None:
    script_path, log_path = argv[1], argv[2]
    with open(script_path) as f:
        spec = json.load(f)
    calls = spec["calls"] if isinstance(spec, dict) else spec
    api = ModelApi(Script(calls), log_path).start()
    print(api.port, flush=True)
    try:
        api.thread.join()
    except KeyboardInterrupt:
        api.stop()


if __name__ == "__main__":
    main(sys.argv)
