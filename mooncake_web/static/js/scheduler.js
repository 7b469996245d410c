"use strict";
// Scheduler: decisions/s, TTFT predicted vs actual, rejections, queues, last decisions.

// Every bucket of the window, empty ones included, so time reads left to right.
function fillBuckets(s) {
  const byStart = new Map(s.buckets.map((b) => [Math.round(b.start / s.bucket_s), b]));
  const last = Math.floor(s.taken_at / s.bucket_s), first = last - Math.round(s.window_s / s.bucket_s) + 1;
  const out = [];
  for (let i = first; i <= last; i++) {
    const b = byStart.get(i);
    out.push({ start: i * s.bucket_s, value: b ? b.decisions : 0, rejected: b ? b.rejected : 0 });
  }
  return out;
}

async function loadScheduler() {
  const s = await MC.get("/api/scheduler");
  MC.stamp(s.taken_at);
  const c = document.getElementById("content");
  const cards = MC.el("div", { class: "cards" },
    MC.el("div", { class: "card" }, MC.el("div", { class: "label" }, "decisions/s"), MC.el("div", { class: "value", id: "dps" }, FMT.perS(s.decisions_per_s, 2)), MC.el("div", { class: "sub" }, `${s.decisions_total ?? "-"} total · source ${s.source}`)),
    MC.el("div", { class: "card" }, MC.el("div", { class: "label" }, "policy"), MC.el("div", { class: "value text" }, s.policy || "-"), MC.el("div", { class: "sub" }, `admission ${s.admission || "-"}`)),
    MC.el("div", { class: "card" }, MC.el("div", { class: "label" }, "TTFT error (MAE)"), MC.el("div", { class: "value" }, MC.secs(s.ttft_mae_s)), MC.el("div", { class: "sub", id: "ttft-bias", title: "TTFT bias: mean of actual − predicted; positive: requests took longer than predicted" }, `bias ${MC.signedSecs(s.ttft_bias_s)} (actual − predicted)`)),
    MC.el("div", { class: "card" }, MC.el("div", { class: "label" }, "rejected"), MC.el("div", { class: "value", id: "rejected-total" }, String(s.rejected_total)), MC.el("div", { class: "sub" }, `in flight ${s.in_flight ?? "-"}`)));
  const charts = MC.el("div", { class: "charts" },
    MC.el("div", { class: "chart", id: "chart-decisions" }, MC.el("h3", {}, "Decisions per 10 s, last 10 min (red: rejected)"),
      s.buckets.length ? MC.barChart(fillBuckets(s)) : MC.el("p", { class: "muted" }, s.audit ? "No decisions in the window." : "No audit database.")),
    MC.el("div", { class: "chart", id: "chart-ttft" }, MC.el("h3", {}, "TTFT predicted vs actual"),
      s.ttft_pairs.length ? MC.scatter(s.ttft_pairs) : MC.el("p", { class: "muted" }, "No measured TTFT yet.")));
  const rej = s.rejected.length ? MC.table(["reason", "count"], s.rejected.map((r) => [r[0], r[1]]), { id: "rejections", num: [1] }) : MC.el("p", { class: "muted", id: "rejections" }, "No rejections.");
  const queues = MC.table(["instance", "role", "queued", "running", "capacity", "queue time"],
    s.queues.map((q) => [q.name, q.role, q.queued, q.running, q.capacity, MC.secs(q.queue_time_s)]), { id: "queues", num: [2, 3, 4, 5] });
  const last = MC.table(["time", "request", "prefill", "decode", "predicted TTFT", "actual TTFT", "admitted"],
    s.last_decisions.map((d) => ({ key: d.request_id, cells: [MC.time(d.time), MC.el("a", { href: "/audit?request=" + encodeURIComponent(d.request_id) }, d.request_id),
      d.prefill || "-", d.decode || "-", MC.secs(d.predicted_ttft_s), MC.secs(d.actual_ttft_s), MC.badge(d.admitted, "yes", d.reject_reason || "rejected")] })), { id: "last-decisions" });
  c.replaceChildren(cards, charts, MC.el("h2", {}, "Rejections"), rej, MC.el("h2", {}, "Instance queues"), queues, MC.el("h2", {}, "Last decisions"), last);
}

document.addEventListener("DOMContentLoaded", async () => {
  try { await loadScheduler(); } catch (e) { MC.showError(e); }
  let busy = false;
  MC.onView(async () => {
    if (busy) return;
    busy = true;
    try { await loadScheduler(); MC.showError(null); } catch (e) { MC.showError(e); } finally { busy = false; }
  });
});
