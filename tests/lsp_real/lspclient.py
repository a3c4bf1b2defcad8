"""A minimal, synchronous Language Server Protocol client over stdio: just
enough to warm a server on a whole project and record its answers as an
oracle. It answers the server's requests (configuration, progress
tokens, capability registration) and keeps the log messages and progress
it is sent, so its caller can wait for the server's own readiness signal."""

import json
import os
import pathlib
import shutil
import subprocess
import tempfile
import threading
import time


def uri_of(path) -> str:
    return pathlib.Path(path).resolve().as_uri()


def path_of(uri: str) -> str:
    from urllib.parse import unquote, urlparse

    return unquote(urlparse(uri).path)


class LspClient:
    def __init__(self, command, root, env=None):
        self.root = pathlib.Path(root).resolve()
        # A temp dir of its own (its TMPDIR), removed on close, so what the
        # server leaves there goes with it.
        self.temp = tempfile.mkdtemp(prefix="lsp-oracle-")
        env = dict(os.environ if env is None else env, TMPDIR=self.temp)
        self.proc = subprocess.Popen(
            command,
            cwd=self.root,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.next_id = 0
        self.cond = threading.Condition()
        self.responses = {}
        self.logs = []
        self.active_progress = set()
        self.ended_progress = []  # titles of the progress that ended
        self.titles = {}
        self.server_status = []  # rust-analyzer's experimental/serverStatus
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    # -- wire --------------------------------------------------------------

    def _send(self, message):
        body = json.dumps(message).encode()
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.proc.stdin.flush()

    def _read(self):
        out = self.proc.stdout
        while True:
            length = None
            while True:
                line = out.readline()
                if not line:
                    with self.cond:
                        self.cond.notify_all()
                    return
                line = line.strip()
                if not line:
                    break
                name, _, value = line.decode().partition(":")
                if name.lower() == "content-length":
                    length = int(value)
            message = json.loads(out.read(length))
            self._dispatch(message)

    def _dispatch(self, m):
        if "id" in m and "method" in m:  # a request from the server
            method = m["method"]
            if method == "workspace/configuration":
                result = [None for _ in m["params"]["items"]]
            else:
                result = None
            self._send({"jsonrpc": "2.0", "id": m["id"], "result": result})
            return
        if "id" in m:
            with self.cond:
                self.responses[m["id"]] = m
                self.cond.notify_all()
            return
        method = m.get("method")
        with self.cond:
            if method == "experimental/serverStatus":
                self.server_status.append(m["params"])
            elif method == "window/logMessage":
                self.logs.append(m["params"]["message"])
            elif method == "$/progress":
                token = json.dumps(m["params"]["token"])
                value = m["params"]["value"]
                kind = value.get("kind")
                if kind == "begin":
                    self.active_progress.add(token)
                    self.titles[token] = value.get("title", "")
                elif kind == "end":
                    self.active_progress.discard(token)
                    self.ended_progress.append(self.titles.get(token, ""))
            self.cond.notify_all()

    def request(self, method, params, timeout=120):
        with self.cond:
            rid = self.next_id
            self.next_id += 1
        self._send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        deadline = time.monotonic() + timeout
        with self.cond:
            while rid not in self.responses:
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    raise RuntimeError(f"{method}: no answer from the server")
                self.cond.wait(left)
            m = self.responses.pop(rid)
        if "error" in m:
            raise RuntimeError(f"{method}: {m['error']}")
        return m.get("result")

    def notify(self, method, params):
        self._send({"jsonrpc": "2.0", "method": method, "params": params})

    def wait_for(self, predicate, timeout, what):
        """Waits (on the reader's events) until `predicate()` holds."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    raise RuntimeError(f"the server never reached: {what}")
                self.cond.wait(left)

    # -- LSP ---------------------------------------------------------------

    def initialize(self, initialization_options=None):
        caps = {
            "general": {"positionEncodings": ["utf-16"]},
            "window": {"workDoneProgress": True},
            "experimental": {"serverStatusNotification": True},
            "workspace": {"configuration": True, "workspaceFolders": True},
            "textDocument": {
                "definition": {"linkSupport": False},
                "hover": {"contentFormat": ["markdown", "plaintext"]},
                "synchronization": {},
            },
        }
        self.request(
            "initialize",
            {
                "processId": os.getpid(),
                "rootUri": uri_of(self.root),
                "workspaceFolders": [{"uri": uri_of(self.root), "name": self.root.name}],
                "capabilities": caps,
                "initializationOptions": initialization_options,
            },
        )
        self.notify("initialized", {})

    def open(self, path, language_id):
        text = pathlib.Path(path).read_text()
        self.notify(
            "textDocument/didOpen",
            {"textDocument": {"uri": uri_of(path), "languageId": language_id, "version": 1, "text": text}},
        )

    def close_document(self, path):
        self.notify("textDocument/didClose", {"textDocument": {"uri": uri_of(path)}})

    def at(self, path, line0, char0):
        return {"textDocument": {"uri": uri_of(path)}, "position": {"line": line0, "character": char0}}

    def definition(self, path, line0, char0):
        r = self.request("textDocument/definition", self.at(path, line0, char0))
        if r is None:
            return []
        if isinstance(r, dict):
            r = [r]
        out = []
        for loc in r:
            uri = loc.get("uri") or loc.get("targetUri")
            rng = loc.get("range") or loc.get("targetSelectionRange")
            out.append((path_of(uri), rng["start"]["line"], rng["start"]["character"]))
        return out

    def references(self, path, line0, char0):
        params = self.at(path, line0, char0)
        params["context"] = {"includeDeclaration": True}
        r = self.request("textDocument/references", params) or []
        return [(path_of(x["uri"]), x["range"]["start"]["line"], x["range"]["start"]["character"]) for x in r]

    def hover(self, path, line0, char0):
        r = self.request("textDocument/hover", self.at(path, line0, char0))
        if not r:
            return ""
        c = r["contents"]
        if isinstance(c, dict):
            return c.get("value", "")
        if isinstance(c, list):
            return "\n".join(x if isinstance(x, str) else x.get("value", "") for x in c)
        return c

    def close(self):
        try:
            self.request("shutdown", None, timeout=10)
            self.notify("exit", None)
            self.proc.wait(timeout=10)
        except Exception:  # noqa: BLE001 - a server that will not stop is killed below
            pass
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, 9)
            self.proc.wait()
        try:
            os.killpg(self.proc.pid, 9)  # what the server started in its session
        except ProcessLookupError:
            pass
        shutil.rmtree(self.temp, ignore_errors=True)
