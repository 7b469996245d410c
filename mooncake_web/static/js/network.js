"use strict";
// Network: a live chart of Transfer Engine tx/rx per NIC, grouped by node; paused NICs.

function renderNetwork(n) {
  const c = document.getElementById("content");
  const parts = [];
  parts.push(n.paused.length
    ? MC.el("div", { class: "error", id: "paused" }, "Paused NICs: " + n.paused.join(", "))
    : MC.el("p", { class: "muted", id: "paused" }, "No NIC is paused."));
  parts.push(MC.el("p", { class: "legend" }, MC.el("span", { class: "tx" }, "— tx"), "  ", MC.el("span", { class: "rx" }, "— rx"), "  Transfer Engine payload bytes per second"));
  if (!n.nodes.length) parts.push(MC.el("p", { class: "notice" }, "No component reports Transfer Engine NICs yet."));
  for (const node of n.nodes) {
    parts.push(MC.el("h2", {}, node.node));
    const charts = MC.el("div", { class: "charts" });
    for (const nic of node.nics) {
      const tx = nic.points.map((p) => [p[0], p[1]]), rx = nic.points.map((p) => [p[0], p[2]]);
      const flag = nic.paused ? MC.el("span", { class: "badge bad" }, "paused") : nic.slow ? MC.el("span", { class: "badge warn" }, "slow") : MC.el("span", { class: "badge ok" }, "ok");
      charts.append(MC.el("div", { class: "chart", "data-node": node.node, "data-nic": nic.nic },
        MC.el("h3", {}, `${nic.nic} `, nic.iface ? MC.el("span", { class: "muted" }, `(${nic.iface}) `) : null, flag),
        MC.el("div", { class: "legend" }, `tx ${MC.rate(nic.te_tx_bps)} · rx ${MC.rate(nic.te_rx_bps)} · errors ${nic.errors} · retries ${nic.retries}`),
        MC.lineChart([{ cls: "tx", points: tx }, { cls: "rx", points: rx }], (v) => MC.rate(v))));
    }
    parts.push(charts);
  }
  if (n.transports && n.transports.length) {
    parts.push(MC.el("h2", {}, "Transports"));
    parts.push(MC.el("p", { class: "muted" }, "own: the component's requests; served: what peers moved through it (same-host shm copies included)"));
    parts.push(MC.table(["node", "transport", "own", "own rate", "served", "served rate"],
      n.transports.map((t) => [t.node, t.transport, MC.bytes(t.bytes), MC.rate(t.bps), MC.bytes(t.served_bytes), MC.rate(t.served_bps)]), { num: [2, 3, 4, 5] }));
  }
  if (n.host_nics.length) {
    parts.push(MC.el("h2", {}, "Host interfaces (kernel counters)"));
    parts.push(MC.table(["host", "iface", "tx", "rx", "errors", "drops"],
      n.host_nics.map((h) => [h.hostname, h.iface, MC.rate(h.tx_bps), MC.rate(h.rx_bps), h.errors, h.drops]), { num: [2, 3, 4, 5] }));
  }
  c.replaceChildren(...parts);
}

document.addEventListener("DOMContentLoaded", async () => {
  try { const n = await MC.get("/api/network"); renderNetwork(n); MC.stamp(n.taken_at); }
  catch (e) { MC.showError(e); }
  MC.onView((doc) => renderNetwork(doc.network));
});
