// dsh ui: the live parts of the page. Everything else is rendered on the
// server; this script only swaps in what the server pushes (event streams
// and a WebSocket for terminals) and sends a person's keys once they took
// the keyboard. Text from programs is set with textContent, never parsed.
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
