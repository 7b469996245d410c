"use strict";
// Login: post the cluster token; the server sets an HttpOnly session cookie.

document.addEventListener("DOMContentLoaded", () => {
  const next = new URLSearchParams(location.search).get("next") || "/";
  const input = MC.el("input", { type: "password", id: "token", name: "token", autocomplete: "off", placeholder: "cluster token" });
  const form = MC.el("form", { class: "login", id: "login-form" },
    MC.el("p", {}, "Actions (pin, unpin, drain) need the cluster token. Print it on a cluster host with ",
      MC.el("code", {}, "mooncake web --print-token"), "."),
    MC.el("label", { for: "token" }, "Cluster token"), input,
    MC.el("button", { class: "primary", type: "submit", id: "login-submit" }, "Log in"));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    try {
      await MC.api("POST", "/api/auth/login", { token: input.value });
      location.href = next.startsWith("/") && !next.startsWith("//") ? next : "/";
    } catch (e) { MC.showError(e); }
  });
  document.getElementById("content").replaceChildren(form);
});
