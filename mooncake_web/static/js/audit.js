"use strict";
// Audit explorer: filter decisions; a decision's candidate table and explanation.

const A = { offset: 0, limit: 25 };

function filters() {
  const f = {};
  for (const id of ["since", "until", "request_id", "instance", "policy"]) {
    const v = document.getElementById("f-" + id).value.trim();
    if (v) f[id] = v;
  }
  if (document.getElementById("f-rejected").checked) f.rejected = "true";
  return f;
}

async function loadDecisions() {
  const q = new URLSearchParams({ ...filters(), limit: A.limit, offset: A.offset });
  try {
    const res = await MC.get("/api/audit/decisions?" + q);
    MC.showError(null);
    const rows = res.decisions.map((d) => ({ key: d.request_id, cells: [MC.time(d.time),
      MC.el("a", { href: "#", class: "req", onclick: (ev) => { ev.preventDefault(); showDecision(d.request_id); } }, d.request_id),
      d.policy, d.chosen_prefill || "-", d.chosen_decode || "-", MC.secs(d.predicted_ttft_s), MC.secs(d.actual_ttft_s),
      d.matched_prefix_blocks === null ? "-" : `${d.matched_prefix_blocks}/${d.prompt_blocks}`,
      MC.badge(d.admitted && (!d.outcome || d.outcome === "completed"), d.outcome || "admitted", d.outcome || "rejected")] }));
    document.getElementById("decisions").replaceChildren(
      MC.table(["time", "request", "policy", "prefill", "decode", "pred. TTFT", "actual TTFT", "prefix hit", "result"], rows, { id: "decisions-table" }),
      MC.el("div", { class: "pager" },
        MC.el("button", { disabled: A.offset === 0 ? "" : null, onclick: () => { A.offset = Math.max(0, A.offset - A.limit); loadDecisions(); } }, "← newer"),
        MC.el("span", { class: "muted", id: "decisions-count" }, `${res.total} matching · showing ${res.offset + 1}–${res.offset + res.decisions.length}`),
        MC.el("button", { disabled: A.offset + A.limit >= res.total ? "" : null, onclick: () => { A.offset += A.limit; loadDecisions(); } }, "older →")));
  } catch (e) { MC.showError(e); }
}

async function showDecision(requestId) {
  const box = document.getElementById("detail");
  try {
    const d = await MC.get("/api/audit/decisions/" + encodeURIComponent(requestId));
    MC.showError(null);
    history.replaceState(null, "", "/audit?request=" + encodeURIComponent(requestId));
    const cands = d.candidates.map((c) => ({ cls: c.chosen ? "chosen" : null, key: c.instance, cells: [c.instance, c.role, c.matched_prefix_blocks,
      MC.secs(c.queue_time_s), MC.secs(c.transfer_time_s), MC.secs(c.prefill_time_s),
      MC.secs(c.role === "prefill" ? c.predicted_ttft_s : c.predicted_tbt_s), c.chosen ? "chosen" : (c.why_not || "")] }));
    box.replaceChildren(MC.el("h2", {}, `Decision for ${d.decision.request_id}`),
      MC.el("div", { class: "explain", id: "explanation" }, d.explanation),
      MC.el("h2", {}, "Candidates"),
      MC.table(["instance", "role", "matched blocks", "queue", "transfer", "prefill", "pred. TTFT/TBT", "outcome"], cands, { id: "candidates", num: [2, 3, 4, 5, 6] }));
    box.scrollIntoView({ block: "nearest" });
  } catch (e) { MC.showError(e); }
}

document.addEventListener("DOMContentLoaded", () => {
  const inp = (id, ph) => MC.el("input", { type: "text", id: "f-" + id, placeholder: ph });
  const form = MC.el("form", { class: "inline", id: "filters" },
    inp("since", "since (15m, ISO, unix)"), inp("until", "until"), inp("request_id", "request id"),
    inp("instance", "instance"), inp("policy", "policy"),
    MC.el("label", {}, MC.el("input", { type: "checkbox", id: "f-rejected" }), " rejected only"),
    MC.el("button", { type: "submit", class: "primary", id: "filter-submit" }, "Filter"));
  form.addEventListener("submit", (ev) => { ev.preventDefault(); A.offset = 0; loadDecisions(); });
  document.getElementById("content").replaceChildren(form, MC.el("div", { id: "decisions" }), MC.el("div", { id: "detail" }));
  const req = new URLSearchParams(location.search).get("request");
  if (req) { document.getElementById("f-request_id").value = req; showDecision(req); }
  loadDecisions();
});
