// dsh ui: the live parts of the page. Everything else is rendered on the
// server; this script only swaps in what the server pushes (event streams
// and a WebSocket for terminals), sends a person's keys once they took
// the keyboard, and sends the changes a person makes on the workspaces
// page (each shown only once the server answers that it is durable).
// Text from programs is set with textContent, never parsed.
"use strict";

(function () {
  const body = document.body;
  const page = body.dataset.page;

  // Colors of swatches come from data attributes (no inline styles: the
  // content security policy forbids them; the CSSOM is fine).
  function paintSwatches(root) {
    root.querySelectorAll("[data-color]").forEach((el) => {
      el.style.background = el.dataset.color;
    });
  }
  paintSwatches(document);

  function fragment(html) {
    const t = document.createElement("template");
    t.innerHTML = html;
    return t.content;
  }

  function stream(url, handlers) {
    const source = new EventSource(url);
    for (const [name, handle] of Object.entries(handlers)) {
      source.addEventListener(name, (e) => handle(JSON.parse(e.data)));
    }
    source.onerror = () => body.classList.add("stream-retrying");
    source.onopen = () => body.classList.remove("stream-retrying");
    return source;
  }

  // A session: its calls arrive as they happen, newest on top.
  if (page === "session" && body.dataset.live === "true") {
    const id = body.dataset.session;
    const tool = body.dataset.tool;
    const rows = document.getElementById("calls");
    let chartTimer = null;
    const refreshCharts = () => {
      clearTimeout(chartTimer);
      chartTimer = setTimeout(async () => {
        const r = await fetch(`/sessions/${encodeURIComponent(id)}/charts`);
        if (r.ok) {
          document.getElementById("charts").innerHTML = await r.text();
        }
      }, 500);
    };
    let url = `/api/sessions/${encodeURIComponent(id)}/events`;
    if (tool) url += `?tool=${encodeURIComponent(tool)}`;
    stream(url, {
      call: (c) => {
        if (rows.querySelector(`tr[data-key="${CSS.escape(c.key)}"]`)) return;
        const f = fragment(c.html);
        paintSwatches(f);
        rows.prepend(f);
        refreshCharts();
      },
      lagged: () => location.reload(),
    });
  }

  // Workspaces: changes go to the server (with this page's token), and
  // the page shows the registry as the server answers it is now; while a
  // drag, an edit or a change is under way, what the stream pushes waits.
  if (page === "workspaces") {
    const list = document.getElementById("workspaces");
    const notice = document.getElementById("notice");
    const token = body.dataset.pageToken;
    let current = list.innerHTML;
    let waiting = null;
    let holds = 0;
    let renders = 0;

    function say(where, text, code) {
      where.textContent = text;
      where.dataset.code = code || "";
      where.hidden = !text;
    }

    function show(html) {
      if (holds > 0) {
        waiting = html;
        return;
      }
      waiting = null;
      if (html === current) return;
      // A handle that had the focus (moving by keyboard) keeps it.
      const active = document.activeElement;
      const focused = active && active.classList && active.classList.contains("handle")
        ? active.closest("[data-workspace], [data-session]")
        : null;
      const key = focused
        ? focused.dataset.session
          ? `tr[data-session="${CSS.escape(focused.dataset.session)}"] .handle`
          : `section[data-workspace="${CSS.escape(focused.dataset.workspace)}"] h2 .handle`
        : null;
      current = html;
      list.innerHTML = html;
      renders += 1;
      body.dataset.renders = String(renders);
      if (key) {
        const again = list.querySelector(key);
        if (again) again.focus();
      }
    }

    // Holds what the stream pushes until the returned release is called.
    function hold() {
      holds += 1;
      let released = false;
      return () => {
        if (released) return;
        released = true;
        holds -= 1;
        if (holds === 0 && waiting !== null) show(waiting);
      };
    }

    // An answer's JSON, or its words when it has none (the guard's
    // refusals are a line of text: "CODE: what to do").
    async function answerOf(r) {
      const text = await r.text();
      try {
        return JSON.parse(text);
      } catch (_) {
        const [code, ...rest] = text.trim().split(": ");
        return rest.length ? { error: { code, message: rest.join(": ") } } : null;
      }
    }

    function failed(where, answer, r) {
      const e = answer && answer.error;
      say(where, e ? `${e.code}: ${e.message}` : `It failed (HTTP ${r.status}).`, e ? e.code : "HTTP");
    }

    // One change: durable when the server answers; then the page shows
    // the workspaces as that answer has them. Refusals are shown as the
    // registry words them.
    async function change(op, el, where) {
      const release = hold();
      if (el) el.classList.add("pending");
      try {
        const r = await fetch("/api/changes", {
          method: "POST",
          headers: { "content-type": "application/json", "x-dsh-page-token": token },
          body: JSON.stringify(op),
        });
        const answer = await answerOf(r);
        if (!r.ok || !answer || answer.error) {
          failed(where || notice, answer, r);
          return null;
        }
        waiting = answer.html;
        say(notice, answer.said, "OK");
        return answer;
      } catch (e) {
        say(where || notice, `The page could not reach dsh: ${e}`, "UNREACHABLE");
        return null;
      } finally {
        if (el) el.classList.remove("pending");
        release();
      }
    }

    stream("/api/workspaces/events", { workspaces: (w) => show(w.html) });

    // Moving: a workspace among the workspaces, a session among its
    // workspace's sessions; the registry's insertBefore.
    const SELECTOR = { workspace: "section[data-workspace]", session: "tr[data-session]" };
    let drag = null;
    let dragRelease = null;

    function item(handle) {
      const row = handle.closest("tr[data-session]");
      if (row) return { kind: "session", id: row.dataset.session, el: row };
      const ws = handle.closest("section[data-workspace]");
      return ws ? { kind: "workspace", id: ws.dataset.workspace, el: ws } : null;
    }

    function sibling(el, kind, forward, skip) {
      let n = forward ? el.nextElementSibling : el.previousElementSibling;
      while (n && (n === skip || !n.matches(SELECTOR[kind]))) {
        n = forward ? n.nextElementSibling : n.previousElementSibling;
      }
      return n;
    }

    // The id the moved item goes before when it lands before `anchor`
    // (an element, or null for the end of what is shown).
    function anchorId(moving, anchor) {
      if (anchor) return anchor.dataset[moving.kind];
      return moving.kind === "session" ? moving.el.parentElement.dataset.after || null : null;
    }

    function move(moving, anchor) {
      if (anchor === moving.el) return;
      if (anchor === sibling(moving.el, moving.kind, true, null)) return; // already there
      const before = anchorId(moving, anchor);
      const op = { op: `${moving.kind}_move`, id: moving.id, before };
      change(op, moving.el);
    }

    function clearMarks() {
      list.querySelectorAll(".drop-before, .drop-after").forEach((el) => {
        el.classList.remove("drop-before", "drop-after");
      });
    }

    function target(e) {
      if (!drag || !e.target.closest) return null;
      const el = e.target.closest(SELECTOR[drag.kind]);
      if (!el || el === drag.el || el.parentElement !== drag.el.parentElement) return null;
      const box = el.getBoundingClientRect();
      return { el, after: e.clientY > box.top + box.height / 2 };
    }

    list.addEventListener("dragstart", (e) => {
      const handle = e.target.closest && e.target.closest(".handle");
      const moving = handle && item(handle);
      if (!moving) return;
      drag = moving;
      dragRelease = hold();
      e.dataTransfer.effectAllowed = "move";
      e.dataTransfer.setData("text/plain", moving.id);
      e.dataTransfer.setDragImage(moving.el, 16, 16);
      moving.el.classList.add("dragging");
    });
    list.addEventListener("dragover", (e) => {
      const t = target(e);
      clearMarks();
      if (!t) return;
      e.preventDefault();
      e.dataTransfer.dropEffect = "move";
      t.el.classList.add(t.after ? "drop-after" : "drop-before");
    });
    list.addEventListener("drop", (e) => {
      const t = target(e);
      clearMarks();
      if (!t) return;
      e.preventDefault();
      move(drag, t.after ? sibling(t.el, drag.kind, true, drag.el) : t.el);
    });
    list.addEventListener("dragend", () => {
      clearMarks();
      if (drag) drag.el.classList.remove("dragging");
      drag = null;
      if (dragRelease) dragRelease();
      dragRelease = null;
    });
    // The keyboard moves too: ↑ and ↓ on a handle.
    list.addEventListener("keydown", (e) => {
      const handle = e.target.closest && e.target.closest(".handle");
      if (!handle || (e.key !== "ArrowUp" && e.key !== "ArrowDown")) return;
      const moving = item(handle);
      if (!moving) return;
      e.preventDefault();
      if (e.key === "ArrowUp") {
        const prev = sibling(moving.el, moving.kind, false, null);
        if (prev) move(moving, prev);
      } else {
        const next = sibling(moving.el, moving.kind, true, null);
        if (next) move(moving, sibling(next, moving.kind, true, null));
      }
    });

    // Renaming in place: Enter saves, Escape gives up.
    function rename(ws) {
      const title = ws.querySelector("h2 .title");
      if (!title || ws.querySelector("input.title-edit")) return;
      const release = hold();
      const input = document.createElement("input");
      input.type = "text";
      input.className = "title-edit";
      input.value = title.textContent;
      input.setAttribute("aria-label", "New title");
      title.replaceWith(input);
      input.focus();
      input.select();
      let done = false;
      const finish = async (save) => {
        if (done) return;
        done = true;
        if (save && input.value !== title.textContent) {
          input.disabled = true;
          const answer = await change({ op: "workspace_rename", id: ws.dataset.workspace, title: input.value }, ws);
          if (!answer) input.replaceWith(title);
        } else {
          input.replaceWith(title);
        }
        release();
      };
      input.addEventListener("keydown", (e) => {
        if (e.key === "Enter") finish(true);
        else if (e.key === "Escape") finish(false);
      });
      input.addEventListener("blur", () => finish(true));
    }

    const confirm = document.getElementById("confirm");
    let removing = null;
    function remove(ws) {
      removing = ws.dataset.workspace;
      const title = ws.querySelector("h2 .title");
      document.getElementById("confirm-text").textContent =
        `Remove workspace “${title ? title.textContent : removing}” from the registry?`;
      confirm.showModal();
    }
    document.getElementById("confirm-yes").addEventListener("click", () => {
      confirm.close();
      if (removing) change({ op: "workspace_remove", id: removing }, null);
      removing = null;
    });
    document.getElementById("confirm-no").addEventListener("click", () => {
      removing = null;
      confirm.close();
    });

    list.addEventListener("click", (e) => {
      const button = e.target.closest && e.target.closest("button");
      if (!button) return;
      const ws = button.closest("section[data-workspace]");
      if (button.classList.contains("rename") && ws) rename(ws);
      else if (button.classList.contains("remove") && ws) remove(ws);
      else if (button.classList.contains("archive")) {
        const row = button.closest("tr[data-session]");
        const archived = button.dataset.archived !== "true";
        change({ op: "session_archive", id: row.dataset.session, archived }, row);
      }
    });

    // The directory picker: the server lists one directory at a time
    // (never what the person could not list); the person opens
    // directories, or types a path, and creates the workspace there.
    const picker = document.getElementById("picker");
    const pickerList = document.getElementById("picker-list");
    const pickerNotice = document.getElementById("picker-notice");
    const where = document.getElementById("picker-where");
    const up = document.getElementById("picker-up");
    const path = document.getElementById("picker-path");
    const title = document.getElementById("picker-title");
    const browsing = body.dataset.picker === "browse";
    picker.querySelectorAll("[data-for]").forEach((el) => {
      el.hidden = el.dataset.for !== body.dataset.picker;
    });

    async function browse(dir) {
      const q = dir ? `?path=${encodeURIComponent(dir)}` : "";
      const r = await fetch(`/api/picker${q}`);
      const answer = await answerOf(r);
      if (!r.ok || !answer || answer.error) {
        failed(pickerNotice, answer, r);
        return;
      }
      say(pickerNotice, "");
      where.textContent = answer.shown;
      pickerList.innerHTML = answer.html;
      up.disabled = !answer.parent;
      up.dataset.path = answer.parent || "";
      if (answer.dir) path.value = answer.dir;
      picker.dataset.dir = answer.dir || "";
    }

    document.getElementById("new-workspace").addEventListener("click", () => {
      say(pickerNotice, "");
      title.value = "";
      picker.showModal();
      if (browsing) browse(picker.dataset.dir || "");
    });
    document.getElementById("picker-cancel").addEventListener("click", () => picker.close());
    document.getElementById("picker-home").addEventListener("click", () => browse(""));
    up.addEventListener("click", () => browse(up.dataset.path));
    document.getElementById("picker-hidden").addEventListener("change", (e) => {
      pickerList.classList.toggle("show-hidden", e.target.checked);
    });
    pickerList.addEventListener("click", (e) => {
      const dir = e.target.closest && e.target.closest("button.dir");
      if (dir) browse(dir.dataset.path);
    });
    path.addEventListener("keydown", (e) => {
      if (e.key === "Enter" && browsing) {
        e.preventDefault();
        browse(path.value.trim());
      }
    });
    title.addEventListener("keydown", (e) => {
      if (e.key === "Enter") {
        e.preventDefault();
        create();
      }
    });
    async function create() {
      const answer = await change(
        { op: "workspace_create", path: path.value.trim(), title: title.value.trim() || null },
        null,
        pickerNotice,
      );
      if (answer) picker.close();
    }
    document.getElementById("picker-create").addEventListener("click", create);
    document.getElementById("picker-choose").addEventListener("click", async () => {
      const r = await fetch("/api/picker/choose", {
        method: "POST",
        headers: { "x-dsh-page-token": token },
      });
      const answer = await answerOf(r);
      if (!r.ok || !answer || answer.error) {
        failed(pickerNotice, answer, r);
      } else if (answer.path) {
        path.value = answer.path;
      }
    });
  }

  // Live: the list of agents, terminals and jobs, replaced when it changes.
  if (page === "live") {
    const live = document.getElementById("live");
    stream("/api/live/events", {
      live: (l) => {
        live.innerHTML = l.html;
        paintSwatches(live);
      },
    });
  }

  // A job: its status and its output, appended as it comes.
  if (page === "job") {
    const id = body.dataset.job;
    const out = document.getElementById("job-output");
    const facts = document.getElementById("job-facts");
    const bytes = document.getElementById("job-bytes");
    const KEEP = 256 * 1024;
    let next = Number(body.dataset.next || 0);
    stream(`/api/jobs/${encodeURIComponent(id)}/events?since=${next}`, {
      job: (j) => {
        facts.innerHTML = j.facts;
        bytes.textContent = `${j.end} bytes`;
        if (j.from < next || j.next === next) {
          return;
        }
        const atBottom = out.scrollTop + out.clientHeight >= out.scrollHeight - 4;
        let text = out.textContent;
        if (j.dropped > 0) text += `\n[… ${j.dropped} bytes skipped …]\n`;
        text += j.output;
        if (text.length > KEEP) text = text.slice(text.length - KEEP);
        out.textContent = text;
        next = j.next;
        if (atBottom) out.scrollTop = out.scrollHeight;
      },
    });
  }

  // A terminal: screens from the server; keys once the keyboard is taken.
  if (page === "terminal") {
    const id = body.dataset.terminal;
    const screen = document.getElementById("screen");
    const take = document.getElementById("take");
    const release = document.getElementById("release");
    const state = document.getElementById("kbd-state");
    const notice = document.getElementById("notice");
    const ended = document.getElementById("term-end");
    const BASE = [
      "#000000", "#cd0000", "#00cd00", "#cdcd00", "#0000ee", "#cd00cd", "#00cdcd", "#e5e5e5",
      "#7f7f7f", "#ff0000", "#00ff00", "#ffff00", "#5c5cff", "#ff00ff", "#00ffff", "#ffffff",
    ];
    const LEVELS = [0, 95, 135, 175, 215, 255];
    const hex = (r, g, b) => "#" + [r, g, b].map((v) => v.toString(16).padStart(2, "0")).join("");
    const palette = (i) => {
      if (i < 16) return BASE[i];
      if (i < 232) {
        const n = i - 16;
        return hex(LEVELS[Math.floor(n / 36)], LEVELS[Math.floor(n / 6) % 6], LEVELS[n % 6]);
      }
      const g = 8 + (i - 232) * 10;
      return hex(g, g, g);
    };
    const color = (c) => (c === "" ? null : c[0] === "i" ? palette(Number(c.slice(1))) : c);
    let held = false;
    let appCursor = false;
    let frames = 0;
    const proto = location.protocol === "https:" ? "wss:" : "ws:";
    const ws = new WebSocket(`${proto}//${location.host}/ws/terminals/${encodeURIComponent(id)}`);

    function say(text, code) {
      notice.textContent = text;
      notice.dataset.code = code || "";
      notice.hidden = !text;
    }

    function draw(f) {
      appCursor = f.app_cursor;
      const rows = document.createDocumentFragment();
      f.lines.forEach((runs, r) => {
        const row = document.createElement("div");
        row.className = "row";
        for (const [text, fg, bg, flags] of runs) {
          const span = document.createElement("span");
          span.textContent = text;
          let fore = color(fg);
          let back = color(bg);
          if (flags & 8) {
            [fore, back] = [back || "var(--screen-bg)", fore || "var(--screen-fg)"];
          }
          if (fore) span.style.color = fore;
          if (back) span.style.background = back;
          if (flags & 1) span.style.fontWeight = "bold";
          if (flags & 2) span.style.fontStyle = "italic";
          if (flags & 4) span.style.textDecoration = "underline";
          if (flags & 16) span.style.opacity = "0.6";
          row.append(span);
        }
        if (runs.length === 0) row.append("\u200b");
        rows.append(row);
        if (r === f.cursor[0] && !f.cursor_hidden) {
          const cursor = document.createElement("span");
          cursor.className = "cursor";
          cursor.style.left = `${f.cursor[1]}ch`;
          row.append(cursor);
        }
      });
      screen.style.setProperty("--cols", f.cols);
      screen.replaceChildren(rows);
      frames += 1;
      screen.dataset.frames = String(frames);
    }

    function setHeld(h) {
      held = h;
      take.hidden = h;
      release.hidden = !h;
      state.textContent = h
        ? "You have the keyboard: your keys go to the program."
        : "Read-only: you are watching.";
      screen.classList.toggle("typing", h);
      body.dataset.keyboard = h ? "held" : "free";
    }

    ws.onmessage = (e) => {
      const m = JSON.parse(e.data);
      if (m.t === "screen") draw(m);
      else if (m.t === "notice") say(m.text, m.code);
      else if (m.t === "keyboard") {
        setHeld(m.held);
        if (m.held) say("");
      } else if (m.t === "end") {
        ended.textContent = m.text;
        ended.hidden = false;
        take.disabled = true;
        setHeld(false);
      }
    };
    ws.onclose = () => {
      body.dataset.socket = "closed";
      take.disabled = true;
    };
    ws.onopen = () => {
      body.dataset.socket = "open";
    };

    const send = (m) => {
      if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify(m));
    };
    take.addEventListener("click", () => {
      send({ t: "take" });
      screen.focus();
    });
    release.addEventListener("click", () => send({ t: "release" }));

    const SPECIAL = {
      Enter: "\r", Backspace: "\x7f", Tab: "\t", Escape: "\x1b",
      Home: "\x1b[H", End: "\x1b[F", Insert: "\x1b[2~", Delete: "\x1b[3~",
      PageUp: "\x1b[5~", PageDown: "\x1b[6~",
      F1: "\x1bOP", F2: "\x1bOQ", F3: "\x1bOR", F4: "\x1bOS",
    };
    const ARROWS = { ArrowUp: "A", ArrowDown: "B", ArrowRight: "C", ArrowLeft: "D" };
    function keyBytes(e) {
      if (ARROWS[e.key]) return (appCursor ? "\x1bO" : "\x1b[") + ARROWS[e.key];
      if (SPECIAL[e.key]) return SPECIAL[e.key];
      if (e.key.length !== 1) return null;
      if (e.ctrlKey && !e.altKey) {
        const k = e.key.toLowerCase();
        if (k >= "a" && k <= "z") return String.fromCharCode(k.charCodeAt(0) - 96);
        const ctl = { "[": "\x1b", "\\": "\x1c", "]": "\x1d", " ": "\x00" };
        return ctl[k] || null;
      }
      return (e.altKey ? "\x1b" : "") + e.key;
    }
    screen.addEventListener("keydown", (e) => {
      if (e.metaKey) return;
      const bytes = keyBytes(e);
      if (bytes === null) return;
      e.preventDefault();
      if (!held) {
        say("This view is read-only: take the keyboard to type.", "READ_ONLY");
        return;
      }
      send({ t: "keys", data: bytes });
    });
    screen.addEventListener("paste", (e) => {
      e.preventDefault();
      if (!held) return;
      const text = (e.clipboardData || window.clipboardData).getData("text");
      if (text) send({ t: "keys", data: text.replace(/\r?\n/g, "\r") });
    });
    setHeld(false);
  }
})();
