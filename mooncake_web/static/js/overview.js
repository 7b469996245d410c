"use strict";
// Overview: components and their health, store and scheduler summaries, alerts.

function card(label, value, sub, id) {
  return MC.el("div", { class: "card", id }, MC.el("div", { class: "label" }, label),
    MC.el("div", { class: "value" }, value), sub ? MC.el("div", { class: "sub" }, sub) : null);
}

function renderOverview(o) {
  const c = document.getElementById("content");
  const st = o.store, sc = o.scheduler;
  const cards = MC.el("div", { class: "cards" },
    card("components healthy", `${o.nodes_up} / ${o.nodes.length}`, null, "card-up"),
    card("store used", st.available ? MC.bytes(st.used) : "-", st.available ? `of ${MC.bytes(st.capacity)} · ${st.keys} objects` : "no master", "card-store"),
    card("pins", st.available ? `${st.key_pins + st.prefix_pins}` : "-", `${st.key_pins} keys, ${st.prefix_pins} prefixes`),
    card("decisions/s", FMT.perS(sc.decisions_per_s, 2), sc.decisions_total === null ? sc.source : `${sc.decisions_total} total · ${sc.rejected_total} rejected`, "card-sched"),
    card("transfer", MC.rate(o.nics.te_bps), `${o.nics.count} NICs · ${o.nics.paused} paused`, "card-nics"),
    card("prefix hit rate", MC.pct(st.hit_rate), "blocks reused / looked up"));
  const alerts = o.alerts.length
    ? MC.el("ul", { class: "alerts", id: "alerts" }, o.alerts.map((a) => MC.el("li", { class: a.level }, `${a.level}: ${a.subject} — ${a.text}`)))
    : MC.el("p", { class: "muted", id: "alerts" }, "No alerts.");
  const rows = o.nodes.map((n) => ({ key: n.name, cells: [
    n.name, n.role, MC.badge(n.up, "healthy", "unreachable"), n.url, n.version || "-",
    FMT.duration(n.uptime_s),
    MC.secs(n.latency_s), n.error || "" ] }));
  c.replaceChildren(cards, MC.el("h2", {}, "Alerts"), alerts, MC.el("h2", {}, "Components"),
    MC.table(["name", "role", "health", "url", "version", "uptime", "poll", "error"], rows, { id: "components" }));
}

document.addEventListener("DOMContentLoaded", async () => {
  try { const o = await MC.get("/api/overview"); renderOverview(o); MC.stamp(o.taken_at); }
  catch (e) { MC.showError(e); }
  MC.onView((doc) => renderOverview(doc.overview));
});
