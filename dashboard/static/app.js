// CallShield dashboard: the live feed and the triage buttons. No framework, no
// innerHTML with data (every value goes through textContent), no inline script (CSP).
"use strict";
(function () {
  const csrf = document.querySelector('meta[name="csrf-token"]').content;
  const page = document.body.dataset.page;
  if (!csrf) return; // the login page

  async function post(path, body) {
    const r = await fetch(path, {
      method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf },
      body: JSON.stringify(body || {}),
    });
    if (!r.ok) throw new Error((await r.json().catch(() => ({}))).detail || r.statusText);
    return r.json();
  }
  const text = (s) => (s == null || s === "" ? "—" : String(s).replace(/_/g, " "));
  function badge(band) {
    const span = document.createElement("span");
    span.className = "band band-" + band; span.textContent = band; return span;
  }
  function cell(row, field, value) {
    const td = row.querySelector('[data-field="' + field + '"]');
    if (!td) return;
    if (value instanceof Node) td.replaceChildren(value); else td.textContent = value;
  }
  function fillTriage(row, t) {
    cell(row, "status", t.status); cell(row, "assignee", text(t.assignee)); cell(row, "label", text(t.label));
  }

  // --- alert queue ------------------------------------------------------------------
  const alertBody = document.querySelector("#alerts tbody");
  function upsertAlert(a) {
    let row = alertBody.querySelector('tr[data-alert-id="' + CSS.escape(a.alert_id) + '"]');
    if (!row) {
      const proto = alertBody.querySelector("tr[data-alert-id]");
      const empty = alertBody.querySelector("tr.empty"); if (empty) empty.remove();
      row = proto ? proto.cloneNode(true) : buildRow();
      row.dataset.alertId = a.alert_id;
      row.querySelectorAll("input").forEach((i) => { i.value = ""; });
      alertBody.prepend(row);
    }
    const link = document.createElement("a");
    link.href = "/calls/" + encodeURIComponent(a.call_id); link.textContent = a.call_id;
    cell(row, "band", badge(a.band)); cell(row, "dimension", text(a.dimension));
    cell(row, "score", a.score.toFixed(2)); cell(row, "call", link);
    cell(row, "updated", new Date(a.updated_at).toLocaleTimeString([], { hour12: false }));
    fillTriage(row, a.triage);
    row.classList.remove("fresh"); void row.offsetWidth; row.classList.add("fresh");
    const count = document.getElementById("alert-count");
    if (count) count.textContent = alertBody.querySelectorAll("tr[data-alert-id]").length;
  }
  function buildRow() {
    const row = document.createElement("tr");
    for (const f of ["band", "dimension", "score", "call", "updated", "status", "assignee", "label"]) {
      const td = document.createElement("td"); td.dataset.field = f; row.append(td);
    }
    const actions = document.createElement("td"); actions.className = "actions";
    if (document.body.dataset.role !== "viewer") {
      const add = (label, act, extra) => {
        const b = document.createElement("button"); b.textContent = label; b.dataset.act = act;
        Object.assign(b.dataset, extra || {}); actions.append(b);
      };
      add("Ack", "ack"); add("Fraud", "label", { label: "true_positive" });
      add("Not fraud", "label", { label: "false_positive" });
    }
    row.append(actions); return row;
  }
  if (alertBody) {
    alertBody.addEventListener("click", async (ev) => {
      const btn = ev.target.closest("button[data-act]"); if (!btn) return;
      const row = btn.closest("tr"); const id = encodeURIComponent(row.dataset.alertId);
      const input = (name) => row.querySelector('[data-input="' + name + '"]');
      try {
        let res;
        if (btn.dataset.act === "ack") res = await post("/api/v1/alerts/" + id + "/ack");
        else if (btn.dataset.act === "label") res = await post("/api/v1/alerts/" + id + "/label", { label: btn.dataset.label });
        else if (btn.dataset.act === "assign") res = await post("/api/v1/alerts/" + id + "/assign", { assignee: input("assignee").value });
        else if (btn.dataset.act === "comment") { await post("/api/v1/alerts/" + id + "/comments", { text: input("comment").value }); input("comment").value = ""; }
        if (res) fillTriage(row, res.triage);
      } catch (e) { alert(e.message); }
    });
  }

  // --- live calls -----------------------------------------------------------------
  const callBody = document.querySelector("#calls tbody");
  let refreshTimer = null;
  function refreshCalls() {
    if (refreshTimer) return;
    refreshTimer = setTimeout(async () => {
      refreshTimer = null;
      const r = await fetch("/api/v1/calls" + location.search, { credentials: "same-origin" });
      if (!r.ok) return;
      const calls = await r.json(); const rows = [];
      for (const c of calls) {
        const row = document.createElement("tr"); row.dataset.callId = c.call_id;
        const link = document.createElement("a"); link.href = "/calls/" + encodeURIComponent(c.call_id); link.textContent = c.call_id;
        const values = [badge(c.band), text(c.dimension), c.score == null ? "—" : c.score.toFixed(2), link, c.ani || "—", c.state, String(c.alerts)];
        values.forEach((v, i) => { const td = document.createElement("td"); if (v instanceof Node) td.append(v); else td.textContent = v; if (i === 2 || i === 6) td.className = "num"; if (i === 4) td.className = "mono"; row.append(td); });
        rows.push(row);
      }
      callBody.replaceChildren(...rows);
      document.getElementById("call-count").textContent = calls.length;
    }, 150);
  }

  // --- reveal (call page) -----------------------------------------------------------
  const reveal = document.querySelector("form.reveal");
  if (reveal) reveal.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    try {
      const res = await post("/api/v1/calls/" + encodeURIComponent(reveal.dataset.callId) + "/reveal", { reason: reveal.reason.value });
      document.getElementById("ani").textContent = res.ani || "—";
      document.getElementById("dnis").textContent = res.dnis || "—";
      reveal.remove();
    } catch (e) { alert(e.message); }
  });

  // --- the live feed ------------------------------------------------------------------
  const badgeLive = document.getElementById("live");
  let backoff = 500;
  function connect() {
    const ws = new WebSocket((location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/api/v1/live");
    ws.onopen = () => { backoff = 500; badgeLive.dataset.state = "on"; badgeLive.textContent = "live"; };
    ws.onmessage = (ev) => {
      const msg = JSON.parse(ev.data);
      if (msg.type === "alert" && alertBody) upsertAlert(msg.alert);
      if (msg.type === "triage" && alertBody) {
        const row = alertBody.querySelector('tr[data-alert-id="' + CSS.escape(msg.alert_id) + '"]');
        if (row) fillTriage(row, msg.triage);
      }
      if ((msg.type === "alert" || msg.type === "call") && callBody) refreshCalls();
    };
    ws.onclose = () => {
      badgeLive.dataset.state = "retry"; badgeLive.textContent = "reconnecting";
      setTimeout(connect, backoff); backoff = Math.min(backoff * 2, 10000);
    };
  }
  if (badgeLive) connect();
})();
