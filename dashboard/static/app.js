// CallShield dashboard: the live feed and the triage buttons. No framework, no
// innerHTML with data (every value goes through textContent), no inline script (CSP).
"use strict";
(function () {
  const csrf = document.querySelector('meta[name="csrf-token"]').content;
  const page = document.body.dataset.page;
  if (!csrf) return; // the login page

  async function send(method, path, body) {
    const r = await fetch(path, {
      method: method, credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf },
      body: JSON.stringify(body || {}),
    });
    if (!r.ok) {
      const d = (await r.json().catch(() => ({}))).detail;
      throw new Error(Array.isArray(d) ? d.map((x) => x.msg).join("; ") : d || r.statusText);
    }
    return r.json();
  }
  const post = (path, body) => send("POST", path, body);
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
  // At 20 alerts/s the cost is the browser's, per frame: every new row shifts every row
  // below it, so each frame repaints the visible table. A row's seven triage controls
  // (5 buttons, 2 inputs) were most of that paint, so a row carries one plain "Triage"
  // button and gets its controls when the pointer moves over it, when it takes focus
  // (its call link or that button, by keyboard too) or on a tap; few rows ever have them. Rows are found
  // through a map, not a selector over the table, and nothing reads layout.
  const alertBody = document.querySelector("#alerts tbody");
  const canTriage = document.body.dataset.role !== "viewer";
  // the live queue keeps the newest rows only: a table that grows without end costs
  // more layout per alert (never fewer than the page was rendered with)
  const maxAlertRows = alertBody ? Math.max(200, alertBody.rows.length) : 0;
  const alertRows = new Map();
  if (alertBody) for (const r of alertBody.querySelectorAll("tr[data-alert-id]")) alertRows.set(r.dataset.alertId, r);
  const alertCount = document.getElementById("alert-count");
  // the page's tenant filter (the server sends a scoped session only its own tenants')
  const alertTenant = alertBody ? alertBody.parentNode.dataset.tenant : "";
  function upsertAlert(a) {
    if (alertTenant && a.tenant !== alertTenant) return;
    let row = alertRows.get(a.alert_id);
    if (!row) {
      const empty = alertBody.querySelector("tr.empty"); if (empty) empty.remove();
      row = buildRow();
      row.dataset.alertId = a.alert_id;
      alertRows.set(a.alert_id, row);
    }
    const link = document.createElement("a");
    link.href = "/calls/" + encodeURIComponent(a.call_id); link.textContent = a.call_id;
    cell(row, "band", badge(a.band)); cell(row, "dimension", text(a.dimension));
    cell(row, "score", a.score.toFixed(2)); cell(row, "call", link); cell(row, "tenant", a.tenant);
    cell(row, "updated", new Date(a.updated_at).toLocaleTimeString([], { hour12: false }));
    fillTriage(row, a.triage);
    if (row.parentNode !== alertBody) alertBody.prepend(row); // filled before it is shown
    flash(row);
    while (alertRows.size > maxAlertRows) {
      const last = alertBody.lastElementChild;
      alertRows.delete(last.dataset.alertId); last.remove();
    }
    if (alertCount) alertCount.textContent = alertRows.size;
  }
  // new or updated rows stay highlighted for a while: a static background set and
  // cleared by one timer, not a CSS animation (which repaints every row it runs on at
  // every frame) and no forced layout per alert (a reflow of the whole table each time)
  const FLASH_MS = 2000;
  const flashing = new Map();
  let sweep = null;
  function flash(row) {
    row.classList.add("fresh");
    flashing.set(row, performance.now() + FLASH_MS);
    if (sweep) return;
    sweep = setInterval(() => {
      const now = performance.now();
      for (const [r, until] of flashing) {
        if (until <= now) { r.classList.remove("fresh"); flashing.delete(r); }
      }
      if (flashing.size === 0) { clearInterval(sweep); sweep = null; }
    }, 250);
  }
  const CELLS = [["band"], ["dimension"], ["score", "num"], ["call"], ["tenant", "tenant"], ["updated", "mono"], ["status"], ["assignee"], ["label"]];
  function buildRow() {
    const row = document.createElement("tr");
    for (const [f, cls] of CELLS) {
      const td = document.createElement("td"); td.dataset.field = f; if (cls) td.className = cls; row.append(td);
    }
    const actions = document.createElement("td"); actions.className = "actions";
    if (canTriage) {
      const open = document.createElement("button"); open.type = "button"; open.className = "triage";
      open.dataset.act = "triage"; open.textContent = "Triage"; actions.append(open);
    }
    row.append(actions); return row;
  }
  // a row's triage controls, made the first time the row is used; returns whether the
  // row got them just now
  function triageControls(row) {
    const actions = row && row.querySelector("td.actions");
    const open = actions && actions.querySelector('button[data-act="triage"]');
    if (!open) return false;
    const add = (label, act, extra) => {
      const b = document.createElement("button"); b.type = "button"; b.textContent = label; b.dataset.act = act;
      Object.assign(b.dataset, extra || {}); return b;
    };
    const input = (name, placeholder, size) => {
      const i = document.createElement("input"); i.dataset.input = name; i.placeholder = placeholder;
      i.setAttribute("aria-label", name); i.size = size; return i;
    };
    const assignee = input("assignee", "assign to", 8); assignee.setAttribute("list", "users");
    actions.replaceChildren(
      add("Ack", "ack"), add("Fraud", "label", { label: "true_positive" }),
      add("Not fraud", "label", { label: "false_positive" }),
      assignee, add("Assign", "assign"), input("comment", "comment", 10), add("Add", "comment"),
    );
    return true;
  }
  if (alertBody && canTriage) {
    const rowOf = (ev) => ev.target.closest && ev.target.closest("tr[data-alert-id]");
    // a real pointer move only: rows sliding under a still pointer (a new alert above
    // them) must not each get controls
    let pointer = "";
    alertBody.addEventListener("mousemove", (ev) => {
      const at = ev.screenX + "," + ev.screenY;
      if (at !== pointer) { pointer = at; triageControls(rowOf(ev)); }
    });
    alertBody.addEventListener("focusin", (ev) => {
      const onOpen = ev.target.matches('button[data-act="triage"]');
      // the Triage button itself goes: its focus moves on to the first control
      if (triageControls(rowOf(ev)) && onOpen) rowOf(ev).querySelector('button[data-act="ack"]').focus();
    });
  }
  if (alertBody) {
    alertBody.addEventListener("click", async (ev) => {
      const btn = ev.target.closest("button[data-act]"); if (!btn) return;
      const row = btn.closest("tr"); const id = encodeURIComponent(row.dataset.alertId);
      if (btn.dataset.act === "triage") {
        if (triageControls(row)) row.querySelector('button[data-act="ack"]').focus();
        return;
      }
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
        const values = [badge(c.band), text(c.dimension), c.score == null ? "—" : c.score.toFixed(2), link, c.tenant, c.ani || "—", c.state, c.queue || "—", c.agent_id || "—", String(c.alerts)];
        values.forEach((v, i) => { const td = document.createElement("td"); if (v instanceof Node) td.append(v); else td.textContent = v; if (i === 2 || i === 9) td.className = "num"; if (i === 4) td.className = "tenant"; if (i === 5) td.className = "mono"; row.append(td); });
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

  // --- watchlist (analysts) ------------------------------------------------------------
  const field = (form, name) => form.elements.namedItem(name);
  const wlAdd = document.getElementById("watchlist-add");
  if (wlAdd) wlAdd.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const status = document.getElementById("watchlist-status");
    status.textContent = "";
    try {
      const file = field(wlAdd, "voiceprint").files[0];
      let voiceprint;
      try { voiceprint = JSON.parse(await file.text()); } catch (e) {
        throw new Error("that file is not the JSON `callshield watchlist embed` prints");
      }
      await post("/api/v1/watchlist", {
        tenant: wlAdd.dataset.tenant, label: field(wlAdd, "label").value,
        legal_basis: field(wlAdd, "legal_basis").value, case_ref: field(wlAdd, "case_ref").value,
        expires_in_days: Number(field(wlAdd, "expires_in_days").value), voiceprint: voiceprint,
      });
      location.reload();
    } catch (e) { status.textContent = e.message; }
  });
  // enrol the caller of a flagged call (call page): the call's kept speaker embedding
  const enrolCall = document.getElementById("enrol-call");
  if (enrolCall) enrolCall.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const status = document.getElementById("enrol-status");
    status.className = ""; status.textContent = "";
    try {
      const tenant = enrolCall.dataset.tenant;
      const entry = await post("/api/v1/watchlist", {
        tenant: tenant, call_id: enrolCall.dataset.callId, label: field(enrolCall, "label").value,
        legal_basis: field(enrolCall, "legal_basis").value, case_ref: field(enrolCall, "case_ref").value,
        expires_in_days: Number(field(enrolCall, "expires_in_days").value),
      });
      const link = document.createElement("a");
      link.href = "/watchlist?tenant=" + encodeURIComponent(tenant); link.textContent = entry.entry_id;
      link.dataset.entryId = entry.entry_id;
      status.append("Enrolled as ", link, entry.status === "pending" ? " (pending: another analyst approves it)" : " (active)");
      enrolCall.querySelector('button[type="submit"]').disabled = true;
    } catch (e) { status.className = "error"; status.textContent = e.message; }
  });
  const wlTable = document.getElementById("watchlist");
  if (wlTable) wlTable.addEventListener("click", async (ev) => {
    const review = ev.target.closest("button[data-approve], button[data-reject]");
    if (review) {
      const id = review.dataset.approve || review.dataset.reject;
      const act = review.dataset.approve ? "approve" : "reject";
      try {
        await post("/api/v1/watchlist/" + encodeURIComponent(id) + "/" + act +
          "?tenant=" + encodeURIComponent(wlTable.dataset.tenant), {});
        location.reload();
      } catch (e) { alert(e.message); }
      return;
    }
    const btn = ev.target.closest("button[data-remove]"); if (!btn) return;
    try {
      await send("DELETE", "/api/v1/watchlist/" + encodeURIComponent(btn.dataset.remove) +
        "?tenant=" + encodeURIComponent(wlTable.dataset.tenant));
      btn.closest("tr").remove();
      document.getElementById("watchlist-count").textContent = wlTable.querySelectorAll("tr[data-entry-id]").length;
    } catch (e) { alert(e.message); }
  });

  // --- customer enrolments (admins remove or expire) --------------------------------------
  const enTable = document.getElementById("enrolments");
  if (enTable) enTable.addEventListener("click", async (ev) => {
    const btn = ev.target.closest("button[data-en-expire], button[data-en-remove]"); if (!btn) return;
    const tenant = enTable.dataset.tenant;
    try {
      if (btn.dataset.enExpire) {
        await post("/api/v1/enrolments/by-ref/" + encodeURIComponent(btn.dataset.enExpire) + "/expire",
          { tenant: tenant, in_days: 0 });
        location.reload();
      } else {
        await send("DELETE", "/api/v1/enrolments/by-ref/" + encodeURIComponent(btn.dataset.enRemove) +
          "?tenant=" + encodeURIComponent(tenant));
        btn.closest("tr").remove();
        document.getElementById("enrolment-count").textContent = enTable.querySelectorAll("tr[data-ref]").length;
      }
    } catch (e) { alert(e.message); }
  });

  // --- webhooks (admins) ----------------------------------------------------------------
  const secretBox = document.getElementById("new-secret");
  function showSecret(endpointId, secret) {
    secretBox.querySelector('[data-field="endpoint"]').textContent = endpointId;
    secretBox.querySelector('[data-field="secret"]').textContent = secret;
    secretBox.hidden = false;
  }
  if (secretBox) secretBox.querySelector('[data-act="done"]').addEventListener("click", () => location.reload());
  const whAdd = document.getElementById("webhook-add");
  if (whAdd) whAdd.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const status = document.getElementById("webhook-status");
    status.textContent = "";
    const types = [...whAdd.querySelectorAll('input[name="event_types"]:checked')].map((i) => i.value);
    const priv = field(whAdd, "allow_private");
    try {
      const res = await post("/api/v1/webhooks", {
        url: field(whAdd, "url").value, event_types: types, allow_private: priv ? priv.checked : false,
      });
      whAdd.reset();
      showSecret(res.endpoint.id, res.secret);
    } catch (e) { status.textContent = e.message; }
  });
  for (const id of ["endpoints", "dead"]) {
    const table = document.getElementById(id);
    if (!table) continue;
    table.addEventListener("click", async (ev) => {
      const btn = ev.target.closest("button[data-wh-act]"); if (!btn) return;
      const row = btn.closest("tr"); const act = btn.dataset.whAct;
      const base = "/api/v1/webhooks/" + encodeURIComponent(row.dataset.endpointId);
      try {
        if (act === "replay") {
          await post(base + "/deliveries/" + encodeURIComponent(row.dataset.eventId) + "/replay");
          const cell = row.querySelector('[data-field="replay"]'); cell.textContent = "queued";
        } else if (act === "rotate") {
          showSecret(row.dataset.endpointId, (await post(base + "/rotate", { overlap_hours: 24 })).secret);
        } else if (act === "delete") {
          if (!confirm("Delete this endpoint? Deliveries still queued for it are dead-lettered.")) return;
          await send("DELETE", base); location.reload();
        } else { await post(base + "/" + act); location.reload(); }
      } catch (e) { alert(e.message); }
    });
  }

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
        const row = alertRows.get(msg.alert_id);
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
