"use strict";
// Nodes: components, store nodes with segment states; drain (with progress) and undrain, each confirmed.

let pollTimer = null;

function drainText(d) {
  const moved = `${d.copied} copied (${MC.bytes(d.copied_bytes)}), ${d.dropped} replicas dropped`;
  const failed = d.failed_count ? `, ${d.failed_count} failed` : "";
  if (d.state === "running") {
    return d.phase === "waiting"
      ? `${moved}; waiting for readers' leases (${d.segment_states.join("/") || "…"})`
      : `moving ${d.done}/${d.total || "?"}`;
  }
  if (d.state === "done") return `DRAINED: ${moved}${failed}`;
  if (d.state === "incomplete") return `not DRAINED yet (${d.segment_states.join("/")}): ${moved}${failed}; drain again to continue`;
  if (d.state === "cancelled") return "stopped by undrain";
  return `failed: ${d.error}`;
}

function drainCell(n) {
  const d = n.drain;
  if (!d) return MC.el("span", { class: "muted" }, "-");
  const frac = d.state === "running" ? (d.phase === "waiting" ? 1 : d.total ? d.done / d.total : 0)
    : d.state === "done" || d.state === "incomplete" ? 1 : 0;
  return MC.el("div", { class: "drain-progress", "data-state": d.state, "data-phase": d.phase },
    MC.el("div", { class: "progress" }, MC.el("span", { style: `width:${(100 * frac).toFixed(0)}%` })),
    MC.el("div", {}, drainText(d)));
}

// One confirmation dialog for both actions; resolves true when the operator confirms.
async function confirmAction(title, body, okLabel) {
  const dlg = MC.el("dialog", { id: "confirm" },
    MC.el("h3", {}, title), MC.el("p", {}, ...body),
    MC.el("form", { method: "dialog", class: "inline" },
      MC.el("button", { value: "cancel", id: "confirm-cancel" }, "Cancel"),
      MC.el("button", { value: "ok", class: "danger", id: "confirm-ok" }, okLabel)));
  document.body.append(dlg);
  dlg.showModal();
  const answer = await new Promise((res) => dlg.addEventListener("close", () => res(dlg.returnValue)));
  dlg.remove();
  return answer === "ok";
}

async function act(node, verb) {
  try { await MC.api("POST", `/api/nodes/${encodeURIComponent(node)}/${verb}`); MC.showError(null); }
  catch (e) { MC.showError(e); }
  await loadNodes();
}

async function confirmDrain(node) {
  const ok = await confirmAction(`Drain ${node}?`, [
    "Its segments go DRAINING: they stay readable but get no new objects. ",
    "Objects that have no replica on another node are copied there first, then the replicas on ",
    `${node} are dropped; reads keep working throughout. It ends DRAINED once readers' leases are over. `,
    "Undrain puts it back into placement."], "Drain");
  if (ok) await act(node, "drain");
}

async function confirmUndrain(node) {
  const ok = await confirmAction(`Undrain ${node}?`, [
    "Its segments go back to MOUNTED and receive new objects again. ",
    "A drain still running from this dashboard is stopped; objects already moved stay where they are."],
    "Undrain");
  if (ok) await act(node, "undrain");
}

async function loadNodes() {
  const n = await MC.get("/api/nodes");
  MC.stamp(n.taken_at);
  const rows = n.store_nodes.map((s) => ({ key: s.node, cells: [s.node,
    s.segments.map((g) => `${g.name} (${g.tier}) ${g.state}`).join(", "),
    MC.bytes(s.used), MC.bytes(s.capacity), MC.usageBar(s.used, s.capacity), s.keys, drainCell(s),
    MC.el("span", { class: "actions" }, MC.el("button", { class: "danger drain", "data-node": s.node,
      disabled: s.segments.every((g) => g.state === "DRAINED") || (s.drain && s.drain.state === "running") ? "" : null,
      onclick: () => confirmDrain(s.node) }, "Drain…"),
    MC.el("button", { class: "undrain", "data-node": s.node,
      disabled: s.segments.every((g) => g.state === "MOUNTED") ? "" : null,
      onclick: () => confirmUndrain(s.node) }, "Undrain…"))] }));
  const comps = n.components.map((c) => ({ key: c.name, cells: [c.name, c.role, MC.badge(c.up, "healthy", "unreachable"), c.hostname || "-", c.pid ?? "-", c.url] }));
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
