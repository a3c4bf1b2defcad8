"""A stdio MCP server that is another one, logged: `mcp_proxy.py LOG --
COMMAND ARGS...` runs COMMAND and passes each JSON-RPC line between its
client and COMMAND unchanged, appending every line to LOG (JSON lines:
`t` in seconds since the epoch, `dir` "in" for client to server and "out"
for server to client, `msg` the parsed message, or `raw` if it was not
JSON). The server's stderr is this process's. SIGTERM, SIGINT and SIGHUP
are passed on to the server; the proxy exits with the server's status."""

import json
import os
import signal
import subprocess
import sys
import threading
import time


def main() -> int:
    args = sys.argv[1:]
    if len(args) < 3 or args[1] != "--":
        sys.stderr.write("usage: mcp_proxy.py LOG -- COMMAND [ARGS...]\n")
        return 2
    log_path, command = args[0], args[2:]
    lock = threading.Lock()
    log = open(log_path, "a", buffering=1)

    def record(direction: str, line: bytes) -> None:
        entry = {"t": time.time(), "dir": direction}
        text = line.decode(errors="replace").rstrip("\r\n")
        try:
            entry["msg"] = json.loads(text)
        except ValueError:
            entry["raw"] = text
        with lock:
            log.write(json.dumps(entry) + "\n")

    server = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)

    def forward(sig, _frame):
        try:
            server.send_signal(sig)
        except ProcessLookupError:
            pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)

    def client_to_server():
        stdin = sys.stdin.buffer
        try:
            for line in iter(stdin.readline, b""):
                record("in", line)
                server.stdin.write(line)
                server.stdin.flush()
        except (BrokenPipeError, OSError):
            pass
        finally:
            with lock:
                log.write(json.dumps({"t": time.time(), "dir": "in", "eof": True}) + "\n")
            try:
                server.stdin.close()
            except OSError:
                pass

    threading.Thread(target=client_to_server, daemon=True).start()

    out = sys.stdout.buffer
    try:
        for line in iter(server.stdout.readline, b""):
            # logged before it is passed on: the time is the server's reply,
            # not the client's read
            record("out", line)
            out.write(line)
            out.flush()
    except (BrokenPipeError, OSError):
        pass
    code = server.wait()
    with lock:
        log.write(json.dumps({"t": time.time(), "dir": "out", "exit": code}) + "\n")
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
