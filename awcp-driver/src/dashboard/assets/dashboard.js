// AWCP dashboards: live updates and buttons for server-rendered pages. No library, no inline
// code (the pages' Content-Security-Policy forbids it); every text shown comes from the server
// as escaped HTML or is set with textContent.
"use strict";
(function () {
  const body = document.body;
  const status = document.getElementById("status");

  function say(text, isError) {
    if (!status) return;
    status.textContent = text;
    status.classList.toggle("error", !!isError);
  }

  function human(secs) {
    const sign = secs < 0 ? "-" : "";
    const s = Math.abs(Math.trunc(secs));
    const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), r = s % 60;
    const two = (n) => String(n).padStart(2, "0");
    if (h > 0) return sign + h + "h " + two(m) + "m";
    if (m > 0) return sign + m + "m " + two(r) + "s";
    return sign + r + "s";
  }

  function tick() {
    const now = Date.now();
    for (const t of document.querySelectorAll("time[data-since]")) {
      const at = Date.parse(t.dataset.since);
      if (!Number.isNaN(at)) t.textContent = human((now - at) / 1000);
    }
    for (const t of document.querySelectorAll("time[data-until]")) {
      const at = Date.parse(t.dataset.until);
      if (!Number.isNaN(at)) t.textContent = at > now ? human((at - now) / 1000) : "expired";
    }
  }
  setInterval(tick, 1000);

  // Regions with data-refresh are replaced by their server-rendered fragment.
  let pending = null;
  async function refreshNow() {
    pending = null;
    for (const el of document.querySelectorAll("[data-refresh]")) {
      try {
        const r = await fetch(el.dataset.refresh, { credentials: "same-origin", cache: "no-store" });
        if (r.status === 401) { location.reload(); return; }
        if (r.ok) el.innerHTML = await r.text();
      } catch (e) { /* the next event retries */ }
    }
    tick();
  }
  function refresh() {
    if (pending === null) pending = setTimeout(refreshNow, 150);
  }

  function logLine(cls, text) {
    const log = document.getElementById("log");
    if (!log) return;
    const li = document.createElement("li");
    li.className = cls;
    li.textContent = text;
    log.appendChild(li);
    while (log.children.length > 500) log.removeChild(log.firstElementChild);
    log.scrollTop = log.scrollHeight;
  }

  // data-changes: the daemon's feed of which delegation changed (`{id, type}`); the page
  // re-fetches its live parts when one it shows changed (data-id), whoever changed it.
  if (body.dataset.changes) {
    const feed = new EventSource(body.dataset.changes, { withCredentials: true });
    // What changed between the page's rendering and the feed's (re)connection is in no event:
    // re-fetch once connected.
    feed.onopen = () => refresh();
    feed.onmessage = (m) => {
      let ev;
      try { ev = JSON.parse(m.data); } catch (e) { return; }
      if (ev.type === "progress" || ev.type === "transfer") return;
      if (!body.dataset.id || ev.id === body.dataset.id) refresh();
    };
  }

  // data-events: one delegation's own stream, for its log (ends with `ended`).
  if (body.dataset.events) {
    const es = new EventSource(body.dataset.events, { withCredentials: true });
    // Each (re)connection starts with the lines so far: the log starts over with it.
    es.onopen = () => {
      const log = document.getElementById("log");
      if (log) log.textContent = "";
    };
    es.onmessage = (m) => {
      let ev;
      try { ev = JSON.parse(m.data); } catch (e) { return; }
      switch (ev.type) {
        case "progress":
          if (ev.message) logLine("progress", ev.message);
          break;
        case "state":
          logLine("state", "state: " + ev.state);
          break;
        case "snapshot":
          logLine("state", "snapshot " + ev.snapshotId + ": " + ev.status);
          break;
        case "connection_lost":
          logLine("problem", "executor stream lost" + (ev.reason ? ": " + ev.reason : "") + "; reconnecting");
          break;
        case "peer_misbehaved":
          logLine("problem", "executor broke the protocol: " + ev.reason);
          break;
        case "ended":
          logLine("state", "ended: " + ev.state + (ev.error ? " (" + ev.error.message + ")" : ""));
          es.close();
          break;
      }
      if (ev.type !== "progress" && ev.type !== "transfer") refresh();
    };
  }
  if (body.dataset.poll) {
    setInterval(refresh, Number(body.dataset.poll) || 2000);
  }

  // Buttons that call the API: data-url, data-method, data-confirm, data-done, data-then.
  document.addEventListener("click", async (e) => {
    const b = e.target.closest("button[data-url]");
    if (!b) return;
    e.preventDefault();
    if (b.dataset.confirm && !window.confirm(b.dataset.confirm)) return;
    b.disabled = true;
    say("Working…");
    try {
      const r = await fetch(b.dataset.url, { method: b.dataset.method || "POST", credentials: "same-origin" });
      const j = await r.json().catch(() => ({}));
      if (!r.ok) {
        say((j.error || ("failed: HTTP " + r.status)) + (j.hint ? ". " + j.hint : ""), true);
        b.disabled = false;
        return;
      }
      say(b.dataset.done || "Done.");
      if (b.dataset.then) { location.assign(b.dataset.then); return; }
      refresh();
    } catch (err) {
      say("The server did not answer: " + err, true);
      b.disabled = false;
    }
  });

  async function postJson(url, value) {
    const r = await fetch(url, {
      method: "POST", credentials: "same-origin",
      headers: { "content-type": "application/json" }, body: JSON.stringify(value),
    });
    const j = await r.json().catch(() => ({}));
    return { ok: r.ok, status: r.status, body: j };
  }

  const form = document.getElementById("new-delegation");
  if (form) {
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      const f = new FormData(form);
      const need = ["workspace", "executor", "prompt"].filter((k) => !String(f.get(k) || "").trim());
      if (need.length) {
        say("Please fill in: " + need.join(", ") + ".", true);
        document.getElementById(need[0]).focus();
        return;
      }
      const value = {
        executorUrl: String(f.get("executor")).trim(),
        environment: { resources: [{ name: "workspace", type: "fs", source: String(f.get("workspace")).trim(),
          mode: f.get("readonly") ? "ro" : "rw" }] },
        task: { description: String(f.get("description") || "").trim(), prompt: String(f.get("prompt")) },
        snapshotMode: String(f.get("snapshotMode") || "staged"),
        ttlSeconds: Number(f.get("ttlSeconds")) || 3600,
      };
      const token = String(f.get("token") || "");
      if (token) value.auth = { type: "bearer", credential: token };
      if (!value.task.description) value.task.description = value.task.prompt.split("\n")[0].slice(0, 80);
      const button = form.querySelector("button[type=submit]");
      button.disabled = true;
      say("Delegating…");
      try {
        const r = await postJson("/delegate", value);
        if (r.ok && r.body.delegationId) {
          location.assign("/ui/d/" + encodeURIComponent(r.body.delegationId));
          return;
        }
        say((r.body.error || ("failed: HTTP " + r.status)) + (r.body.hint ? ". " + r.body.hint : ""), true);
      } catch (err) {
        say("The daemon did not answer: " + err, true);
      }
      button.disabled = false;
    });
  }

  const login = document.getElementById("login");
  if (login) {
    login.addEventListener("submit", async (e) => {
      e.preventDefault();
      const token = String(new FormData(login).get("token") || "");
      const r = await postJson("/ui/login", { token: token }).catch(() => ({ ok: false, body: {} }));
      if (r.ok) { location.reload(); return; }
      say(r.body.error || "That token was not accepted.", true);
    });
  }

  tick();
})();
