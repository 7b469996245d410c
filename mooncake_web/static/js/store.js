"use strict";
// Store: capacity per node and tier, object browser (prefix search, pages), pins.

const S = { prefix: "", regex: "", cursors: [""], page: 0, limit: 25 };

function renderCapacity(cap) {
  const rows = cap.nodes.map((n) => ({ key: `${n.node}/${n.tier}`, cells: [n.node, n.tier, MC.bytes(n.used), MC.bytes(n.capacity), MC.usageBar(n.used, n.capacity), n.keys, n.states.join(", ")] }));
  const tiers = cap.tiers.map((t) => `${t.tier}: ${MC.bytes(t.used)} of ${MC.bytes(t.capacity)}`).join(" · ");
  document.getElementById("capacity").replaceChildren(
    MC.el("p", { class: "muted" }, cap.available ? `${cap.keys} objects (${cap.processing} being written) · ${cap.evicted_total} evicted · ${tiers}` : "No master answered."),
    MC.table(["node", "tier", "used", "capacity", "usage", "objects", "segment state"], rows, { id: "capacity-table", num: [2, 3, 5] }));
}

async function loadObjects() {
  const q = new URLSearchParams({ prefix: S.prefix, start_after: S.cursors[S.page], limit: S.limit });
  if (S.regex) q.set("regex", S.regex);
  const box = document.getElementById("objects");
  try {
    const res = await MC.get("/api/store/objects?" + q);
    MC.showError(null);
    const rows = res.entries.map((e) => ({ key: e.key, cells: [
      MC.el("a", { href: "#", class: "obj", onclick: (ev) => { ev.preventDefault(); showObject(e.key); } }, e.key),
      MC.bytes(e.size), e.state,
      MC.el("button", { onclick: () => pinTarget(e.key, false) }, "pin key")] }));
    S.next = res.next_start_after;
    box.replaceChildren(
      MC.table(["key", "size", "state", ""], rows, { id: "objects-table", num: [1] }),
      MC.el("div", { class: "pager" },
        MC.el("button", { id: "prev", disabled: S.page === 0 ? "" : null, onclick: () => { S.page--; loadObjects(); } }, "← previous"),
        MC.el("span", { class: "muted" }, `page ${S.page + 1} · ${res.entries.length} shown`),
        MC.el("button", { id: "next", disabled: S.next === null ? "" : null, onclick: () => { S.cursors[S.page + 1] = S.next; S.page++; loadObjects(); } }, "next →")));
  } catch (e) { MC.showError(e); }
}

async function showObject(key) {
  try {
    const o = await MC.get("/api/store/objects/" + key.split("/").map(encodeURIComponent).join("/"));
    MC.showError(null);
    const reps = o.replicas.map((r, i) => [`replica ${i}`, r.map((s) => `${s[0]} @${s[1]} +${MC.bytes(s[2])}`).join(", ")]);
    const pin = o.pin === "NONE" ? "none" : o.pin.toLowerCase() + (o.pin_remaining_s === null ? "" : ` (${FMT.duration(o.pin_remaining_s)} left)`);
    document.getElementById("object-detail").replaceChildren(
      MC.el("h2", {}, o.key),
      MC.table(["field", "value"], [["size", MC.bytes(o.size)], ["state", o.state], ...reps,
        ["lease", o.lease_remaining_s > 0 ? MC.secs(o.lease_remaining_s) : "none"],
        ["idle", FMT.duration(o.idle_s)], ["pin", pin]], { id: "object-table" }));
    document.getElementById("object-detail").scrollIntoView({ block: "nearest" });
  } catch (e) { MC.showError(e); }
}

async function loadPins() {
  const pins = await MC.get("/api/store/pins");
  const rows = pins.map((p) => ({ key: p.target, cells: [p.target, p.prefix ? "prefix" : "key", p.hard ? "hard" : "soft",
    p.remaining_s === null ? "never" : FMT.duration(p.remaining_s),
    MC.el("button", { class: "unpin", onclick: () => unpinTarget(p.target, p.prefix) }, "unpin")] }));
  document.getElementById("pins").replaceChildren(rows.length ? MC.table(["target", "kind", "level", "expires in", ""], rows, { id: "pins-table" }) : MC.el("p", { class: "muted", id: "pins-table" }, "No pins."));
}

async function pinTarget(target, prefix, hard) {
  try {
    await MC.api("POST", "/api/store/pins", { target, prefix, hard: !!hard });
    MC.showError(null);
    await loadPins();
  } catch (e) { MC.showError(e); }
}

async function unpinTarget(target, prefix) {
  if (!confirm(`Unpin ${prefix ? "prefix" : "key"} "${target}"?`)) return;
  try {
    await MC.api("DELETE", "/api/store/pins?" + new URLSearchParams({ target, prefix }));
    MC.showError(null);
    await loadPins();
  } catch (e) { MC.showError(e); }
}

document.addEventListener("DOMContentLoaded", async () => {
  const c = document.getElementById("content");
  const prefix = MC.el("input", { type: "text", id: "prefix", placeholder: "key prefix" });
  const regex = MC.el("input", { type: "text", id: "regex", placeholder: "regex (optional)" });
  const search = MC.el("form", { class: "inline", id: "search" }, prefix, regex, MC.el("button", { type: "submit", class: "primary" }, "Search"));
  search.addEventListener("submit", (ev) => { ev.preventDefault(); S.prefix = prefix.value; S.regex = regex.value; S.cursors = [""]; S.page = 0; loadObjects(); });
  const pinIn = MC.el("input", { type: "text", id: "pin-target", placeholder: "prefix to pin" });
  const hard = MC.el("input", { type: "checkbox", id: "pin-hard" });
  const pinForm = MC.el("form", { class: "inline", id: "pin-form" }, pinIn, MC.el("label", {}, hard, " hard"), MC.el("button", { type: "submit", class: "primary", id: "pin-submit" }, "Pin prefix"));
  pinForm.addEventListener("submit", (ev) => { ev.preventDefault(); if (pinIn.value) pinTarget(pinIn.value, true, hard.checked); });
  c.replaceChildren(MC.el("h2", {}, "Capacity per node and tier"), MC.el("div", { id: "capacity" }),
    MC.el("h2", {}, "Pins"), pinForm, MC.el("div", { id: "pins" }),
    MC.el("h2", {}, "Objects"), search, MC.el("div", { id: "objects" }), MC.el("div", { id: "object-detail" }));
  try {
    renderCapacity(await MC.get("/api/store/capacity"));
    await loadPins();
    await loadObjects();
  } catch (e) { MC.showError(e); }
  MC.onView(async () => { try { renderCapacity(await MC.get("/api/store/capacity")); } catch (e) { MC.showError(e); } });
});
