// Cases and evidence hold forms (pages /cases, /cases/{id}, /calls/{id}): they call the
// REST API with the page's CSRF token, then reload.
(function () {
  "use strict";
  const csrf = document.querySelector('meta[name="csrf-token"]').content;
  async function send(method, path, body) {
    const r = await fetch(path, {
      method: method, credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    if (!r.ok) {
      const d = (await r.json().catch(() => ({}))).detail;
      throw new Error(Array.isArray(d) ? d.map((x) => x.msg).join("; ") : d || r.statusText);
    }
    return r.json();
  }
  function bind(id, handler) {
    const form = document.getElementById(id); if (!form) return;
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const err = form.querySelector('[data-field="error"]'); if (err) err.textContent = "";
      const v = (n) => { const el = form.elements.namedItem(n); return el ? el.value.trim() : ""; };
      try { await handler(form, v); } catch (e) { if (err) err.textContent = e.message; }
    });
  }
  bind("case-add", async (form, v) => {
    const calls = v("call_id") ? [{ call_id: v("call_id"), link: "manual" }] : [];
    const c = await send("POST", "/api/v1/cases", { title: v("title"), calls: calls });
    location.href = "/cases/" + c.case_id;
  });
  bind("case-edit", async (form, v) => {
    const body = { version: Number(form.dataset.version), disposition: v("disposition") };
    if (v("loss_amount")) body.loss_amount = v("loss_amount");
    if (v("currency")) body.currency = v("currency");
    await send("PATCH", "/api/v1/cases/" + form.dataset.caseId, body); location.reload();
  });
  bind("case-link", async (form, v) => {
    await send("POST", "/api/v1/cases/" + form.dataset.caseId + "/calls",
      { call_id: v("call_id"), link: v("link"), note: v("note") });
    location.reload();
  });
  bind("evidence-hold", async (form, v) => {
    const path = "/api/v1/evidence/calls/" + encodeURIComponent(form.dataset.callId) + "/hold";
    if (form.dataset.held === "1") await send("DELETE", path);
    else await send("PUT", path, { reason: v("reason") });
    location.reload();
  });
})();
