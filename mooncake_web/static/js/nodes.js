"use strict";
// Nodes: components, store nodes with segment states; drain with confirmation and progress.

let pollTimer = null;

function drainCell(n) {
  const d = n.drain;
  if (!d) return MC.el("span", { class: "muted" }, "–");
  const frac = d.total ? d.scanned / d.total : d.state === "done" ? 1 : 0;
  const text = d.state === "done"
    ? `done: ${d.on_node} objects still on the node, ${d.sole_count} only there`
    : d.state === "failed" ? `failed: ${d.error}` : `scanning ${d.scanned}/${d.total}`;
  return MC.el("div", { class: "drain-progress", "data-state": d.state },
    MC.el("div", { class: "progress" }, MC.el("span", { style: `width:${(100 * frac).toFixed(0)}%` })),
    MC.el("div", {}, text));
}

async function confirmDrain(node) {
  const dlg = MC.el("dialog", { id: "confirm" },
    MC.el("h3", {}, `Drain ${node}?`),
    MC.el("p", {}, "Its segments go DRAINING: they stay readable but get no new objects. ",
      "Objects are not copied elsewhere; those whose only replica is here are lost if the node goes away. ",
      "There is no undrain: restarting the node mounts its segment afresh."),
    MC.el("form", { method: "dialog", class: "inline" },
      MC.el("button", { value: "cancel", id: "confirm-cancel" }, "Cancel"),
      MC.el("button", { value: "ok", class: "danger", id: "confirm-ok" }, "Drain")));
  document.body.append(dlg);
  dlg.showModal();
  const answer = await new Promise((res) => dlg.addEventListener("close", () => res(dlg.returnValue)));
  dlg.remove();
  if (answer !== "ok") return;
  try { await MC.api("POST", `/api/nodes/${encodeURIComponent(node)}/drain`); MC.showError(null); }
  catch (e) { MC.showError(e); }
  await loadNodes();
}

async function loadNodes() {
  const n = await MC.get("/api/nodes");
  MC.stamp(n.taken_at);
  const rows = n.store_nodes.map((s) => ({ key: s.node, cells: [s.node,
    s.segments.map((g) => `${g.name} (${g.tier}) ${g.state}`).join(", "),
    MC.bytes(s.used), MC.bytes(s.capacity), MC.usageBar(s.used, s.capacity), s.keys, drainCell(s),
    MC.el("button", { class: "danger drain", "data-node": s.node,
      disabled: s.segments.every((g) => g.state !== "MOUNTED") ? "" : null,
      onclick: () => confirmDrain(s.node) }, "Drain…")] }));
  const comps = n.components.map((c) => ({ key: c.name, cells: [c.name, c.role, MC.badge(c.up, "up", "down"), c.hostname || "–", c.pid ?? "–", c.url] }));
  document.getElementById("content").replaceChildren(
    MC.el("h2", {}, "Store nodes"), MC.table(["node", "segments", "used", "capacity", "usage", "objects", "drain", ""], rows, { id: "store-nodes", num: [2, 3, 5] }),
    MC.el("h2", {}, "Components"), MC.table(["name", "role", "health", "host", "pid", "url"], comps, { id: "components" }));
  const running = n.store_nodes.some((s) => s.drain && s.drain.state === "running");
  clearTimeout(pollTimer);
  if (running) pollTimer = setTimeout(() => loadNodes().catch((e) => MC.showError(e)), 500);
}

document.addEventListener("DOMContentLoaded", () => {
  loadNodes().catch((e) => MC.showError(e));
});
