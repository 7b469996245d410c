// Shared helpers of every dashboard page: API calls with the CSRF header, the SSE
// stream, formatting, and small SVG charts drawn by hand (no libraries, no CDN).
"use strict";

const MC = {
  csrf: null,
  session: null,
  listeners: [],

  el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v;
      else if (k === "style") e.style.cssText = v;  // CSSOM: allowed by the CSP, attributes are not
      else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else if (v !== null && v !== undefined && v !== false) e.setAttribute(k, v);
    }
    for (const k of kids.flat()) {
      if (k === null || k === undefined) continue;
      e.append(k instanceof Node ? k : document.createTextNode(String(k)));
    }
    return e;
  },

  async api(method, path, body) {
    const opts = { method, headers: { "Accept": "application/json" }, credentials: "same-origin" };
    if (method !== "GET" && MC.csrf) opts.headers["X-CSRF-Token"] = MC.csrf;
    if (body !== undefined) {
      opts.headers["Content-Type"] = "application/json";
      opts.body = JSON.stringify(body);
    }
    const r = await fetch(path, opts);
    let data = null;
    const text = await r.text();
    try { data = text ? JSON.parse(text) : null; } catch (e) { data = text; }
    if (!r.ok) {
      let msg = data && data.detail !== undefined ? data.detail : text;
      if (Array.isArray(msg)) msg = msg.map((d) => `${(d.loc || []).slice(1).join(".")}: ${d.msg}`).join("; ");
      const err = new Error(`${r.status}: ${msg}`);
      err.status = r.status;
      throw err;
    }
    return data;
  },
  get(path) { return MC.api("GET", path); },

  showError(e) {
    const box = document.getElementById("error");
    if (!e) { box.hidden = true; box.textContent = ""; return; }
    box.hidden = false;
    box.textContent = e.message || String(e);
  },

  stamp(t) {
    const u = document.getElementById("updated");
    if (u && t) u.textContent = "updated " + new Date(t * 1000).toLocaleTimeString();
  },

  async loadSession() {
    MC.session = await MC.get("/api/auth/session");
    MC.csrf = MC.session.csrf;
    const box = document.getElementById("auth-box");
    box.replaceChildren();
    if (MC.session.logged_in) {
      box.append(MC.el("span", { id: "auth-state" }, "logged in"),
        MC.el("button", { id: "logout", onclick: async () => {
          await MC.api("POST", "/api/auth/logout"); location.reload(); } }, "Log out"));
    } else {
      box.append(MC.el("span", { id: "auth-state" }, "read-only"), " ",
        MC.el("a", { href: "/login?next=" + encodeURIComponent(location.pathname), style: "color:#93c5fd" }, "Log in"));
    }
  },

  // One EventSource for the page; each page registers a handler for the "view" event.
  onView(fn) {
    MC.listeners.push(fn);
    if (MC.source) return;
    MC.source = new EventSource("/api/events");
    MC.source.addEventListener("view", (ev) => {
      const doc = JSON.parse(ev.data);
      MC.stamp(doc.overview.taken_at);
      for (const f of MC.listeners) {
        try { f(doc); } catch (e) { MC.showError(e); }
      }
    });
  },

  // Numbers: static/js/fmt.js, the rules of mooncake_core/fmt.py (CLI and `mooncake top`).
  bytes(n) { return FMT.size(n); },
  rate(n) { return FMT.byteRate(n); },
  secs(s) { return FMT.seconds(s); },
  // A signed difference, sign always shown ("+17 ms"): prediction errors and the bias.
  signedSecs(s) { return FMT.signedSeconds(s); },
  pct(x) { return FMT.pct(x, 1); },
  time(t) { return t ? new Date(t * 1000).toLocaleString() : "-"; },
  badge(ok, yes, no) { return MC.el("span", { class: "badge " + (ok ? "ok" : "bad") }, ok ? yes : no); },
  usageBar(used, cap) {
    const f = cap ? used / cap : 0;
    return MC.el("div", { class: "usage" },
      MC.el("div", { class: "bar" + (f >= 0.9 ? " hot" : ""), title: MC.pct(f) },
        MC.el("span", { style: `width:${Math.min(100, 100 * f).toFixed(1)}%` })),
      MC.el("span", { class: "muted" }, MC.pct(f)));
  },

  table(headers, rows, opts) {
    const num = (opts && opts.num) || [];
    const thead = MC.el("tr", {}, headers.map((h, i) => MC.el("th", { class: num.includes(i) ? "num" : null }, h)));
    const body = rows.map((r) => {
      const cells = r.cells || r;
      return MC.el("tr", { class: r.cls || null, "data-key": r.key || null },
        cells.map((c, i) => MC.el("td", { class: num.includes(i) ? "num" : null }, c)));
    });
    return MC.el("table", { id: opts && opts.id }, MC.el("thead", {}, thead), MC.el("tbody", {}, body));
  },

  // --- SVG charts ---------------------------------------------------------------
  svg(tag, attrs, ...kids) {
    const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    for (const k of kids.flat()) e.append(k instanceof Node ? k : document.createTextNode(String(k)));
    return e;
  },

  // Lines over time: series = [{cls, points: [[t, y], ...]}]; yfmt formats the axis.
  lineChart(series, yfmt, w = 560, h = 160) {
    const pad = { l: 64, r: 8, t: 8, b: 18 };
    const all = series.flatMap((s) => s.points);
    const t0 = all.length ? Math.min(...all.map((p) => p[0])) : 0;
    const t1 = all.length ? Math.max(...all.map((p) => p[0])) : 1;
    const ymax = Math.max(1, ...all.map((p) => p[1])) * 1.1;
    const x = (t) => pad.l + (t1 > t0 ? (t - t0) / (t1 - t0) : 1) * (w - pad.l - pad.r);
    const y = (v) => h - pad.b - (v / ymax) * (h - pad.t - pad.b);
    const root = MC.svg("svg", { viewBox: `0 0 ${w} ${h}`, preserveAspectRatio: "none" });
    for (let i = 0; i <= 4; i++) {
      const v = (ymax * i) / 4;
      root.append(MC.svg("line", { class: "grid", x1: pad.l, x2: w - pad.r, y1: y(v), y2: y(v) }),
        MC.svg("text", { class: "axis", x: pad.l - 4, y: y(v) + 3, "text-anchor": "end" }, yfmt(v)));
    }
    if (all.length) {
      root.append(MC.svg("text", { class: "axis", x: pad.l, y: h - 4 }, new Date(t0 * 1000).toLocaleTimeString()),
        MC.svg("text", { class: "axis", x: w - pad.r, y: h - 4, "text-anchor": "end" }, new Date(t1 * 1000).toLocaleTimeString()));
    }
    for (const s of series) {
      if (!s.points.length) continue;
      const d = s.points.map((p, i) => `${i ? "L" : "M"}${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(" ");
      root.append(MC.svg("path", { class: s.cls, d }));
    }
    root.dataset.points = String(all.length);
    return root;
  },

  // Bars per bucket: buckets = [{start, value, rejected}]
  barChart(buckets, w = 560, h = 160) {
    const pad = { l: 40, r: 8, t: 8, b: 18 };
    const root = MC.svg("svg", { viewBox: `0 0 ${w} ${h}`, preserveAspectRatio: "none" });
    const vmax = Math.max(1, ...buckets.map((b) => b.value));
    const bw = buckets.length ? (w - pad.l - pad.r) / buckets.length : 0;
    const y = (v) => h - pad.b - (v / vmax) * (h - pad.t - pad.b);
    for (let i = 0; i <= 4; i++) {
      const v = (vmax * i) / 4;
      root.append(MC.svg("line", { class: "grid", x1: pad.l, x2: w - pad.r, y1: y(v), y2: y(v) }),
        MC.svg("text", { class: "axis", x: pad.l - 4, y: y(v) + 3, "text-anchor": "end" }, v.toFixed(v < 10 ? 1 : 0)));
    }
    const g = MC.svg("g", { class: "bars" });
    buckets.forEach((b, i) => {
      const x0 = pad.l + i * bw + 1;
      g.append(MC.svg("rect", { x: x0, y: y(b.value), width: Math.max(1, bw - 2), height: h - pad.b - y(b.value) }));
      if (b.rejected) g.append(MC.svg("rect", { class: "rej", x: x0, y: y(b.rejected), width: Math.max(1, bw - 2), height: h - pad.b - y(b.rejected) }));
    });
    root.append(g);
    if (buckets.length) {
      const t = (b) => new Date(b.start * 1000).toLocaleTimeString();
      root.append(MC.svg("text", { class: "axis", x: pad.l, y: h - 4 }, t(buckets[0])),
        MC.svg("text", { class: "axis", x: w - pad.r, y: h - 4, "text-anchor": "end" }, t(buckets[buckets.length - 1])));
    }
    return root;
  },

  // Predicted vs actual scatter with the y = x diagonal.
  scatter(pairs, w = 560, h = 200) {
    const pad = { l: 56, r: 8, t: 8, b: 28 };
    const vmax = Math.max(0.001, ...pairs.flatMap((p) => [p.predicted_s, p.actual_s])) * 1.1;
    const x = (v) => pad.l + (v / vmax) * (w - pad.l - pad.r);
    const y = (v) => h - pad.b - (v / vmax) * (h - pad.t - pad.b);
    const root = MC.svg("svg", { viewBox: `0 0 ${w} ${h}`, preserveAspectRatio: "none" });
    root.append(MC.svg("line", { class: "grid", x1: x(0), y1: y(0), x2: x(vmax), y2: y(vmax) }));
    for (let i = 0; i <= 4; i++) {
      const v = (vmax * i) / 4;
      root.append(MC.svg("text", { class: "axis", x: pad.l - 4, y: y(v) + 3, "text-anchor": "end" }, MC.secs(v)),
        MC.svg("text", { class: "axis", x: x(v), y: h - 14, "text-anchor": i === 4 ? "end" : i ? "middle" : "start" }, MC.secs(v)));
    }
    root.append(MC.svg("text", { class: "axis", x: w - pad.r, y: h - 2, "text-anchor": "end" }, "predicted →  (↑ actual)"));
    for (const p of pairs) {
      root.append(MC.svg("circle", { class: "pred", cx: x(p.predicted_s), cy: y(p.actual_s), r: 3.5 },
        MC.svg("title", {}, `${p.request_id}: predicted ${MC.secs(p.predicted_s)}, actual ${MC.secs(p.actual_s)}`)));
    }
    return root;
  },
};

document.addEventListener("DOMContentLoaded", () => {
  MC.loadSession().catch((e) => MC.showError(e));
});
