// The operator console: an overview to keep open (memory per accelerator, deployments and their
// health, traffic per capability, recent placements, evictions and requests) and the admin API's
// other reads as tables. Data is only ever set as text (never parsed as HTML); the token stays in
// this tab (sessionStorage) and is sent to this gateway alone.
"use strict";

const API = "/admin/v1";
const TOKEN_KEY = "modelforge-operator-token";
const REFRESH_MS = 5000;

// The tables, each one GET of the admin API (a test checks that every path is one).
const VIEWS = [
  { name: "Nodes", path: "/nodes", about: "Registered nodes, their accelerators and liveness." },
  { name: "Deployments", path: "/deployments", about: "Stable deployments and experiments with their residency policy." },
  { name: "Requests", path: "/requests?limit=50", about: "The latest requests and their latency (no content is ever stored)." },
  { name: "Placements", path: "/scheduler/placements?limit=50", about: "The scheduler's latest decisions." },
  { name: "Evictions", path: "/scheduler/evictions?limit=50", about: "Models unloaded to make room, and for what." },
  { name: "Scheduler", path: "/scheduler/metrics", about: "Scheduler counters and gauges." },
  { name: "Policy", path: "/scheduler/policy", about: "The scheduler policy in force." },
  { name: "Clients", path: "/clients", about: "Service clients, their scopes and limits (never keys)." },
  { name: "Approvals", path: "/approvals", about: "Lab and production approvals, each bound to an evidence fingerprint." },
  { name: "Candidates", path: "/candidates", about: "Candidates and their probes." },
  { name: "Projects", path: "/projects", about: "Projects, their channel bindings and clients." },
  { name: "Projection", path: "/projection", about: "The read model's checkpoints, lag and gaps." },
];
const OVERVIEW = { name: "Overview", path: "", about: "The fleet at a glance; refreshed every 5 s while “auto” is on." };

let current = OVERVIEW;
let timer = null;

function el(tag, text, attributes) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  for (const [key, value] of Object.entries(attributes || {})) node.setAttribute(key, value);
  return node;
}

function setStatus(text, isError) {
  const status = document.getElementById("status");
  status.textContent = text;
  status.className = isError ? "error" : "";
}

class ReadError extends Error {}

// One admin read: its JSON body, and whether the read model answered it stale (and why).
async function read(path) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (!token) throw new ReadError("no operator token");
  let response;
  try {
    response = await fetch(API + path, { headers: { Authorization: "Bearer " + token }, cache: "no-store" });
  } catch (error) {
    throw new ReadError("the gateway did not answer: " + error.message);
  }
  const body = await response.json().catch(() => null);
  if (!response.ok) {
    throw new ReadError(body && body.error ? body.error.code + ": " + body.error.message : response.status + " " + response.statusText);
  }
  const stale = response.headers.get("x-read-model-stale") === "true" ? response.headers.get("x-read-model-stale-reason") || "stale" : "";
  return { body, stale };
}

// A table of `rows` with the given columns: [heading, value of a row (text), class?].
function table(rows, columns) {
  const t = el("table");
  const head = el("tr");
  for (const [heading, , className] of columns) head.appendChild(el("th", heading, className ? { class: className } : {}));
  t.appendChild(head);
  for (const row of rows) {
    const tr = el("tr");
    for (const [, value, className] of columns) tr.appendChild(el("td", value(row), className ? { class: className } : {}));
    t.appendChild(tr);
  }
  if (!rows.length) {
    const tr = el("tr");
    tr.appendChild(el("td", "none yet", { colspan: String(columns.length), class: "empty" }));
    t.appendChild(tr);
  }
  return t;
}

function panel(id, title) {
  const section = el("section", undefined, { class: "panel", id });
  section.appendChild(el("h2", title));
  return section;
}

function accelerators(overview) {
  const section = panel("accelerators", "Accelerators");
  const grid = el("div", undefined, { class: "cards" });
  for (const a of overview.accelerators) {
    const card = el("article", undefined, { class: "card accelerator" });
    const title = el("header");
    title.append(el("strong", a.accelerator_id), el("span", a.node_id + (a.hardware_model ? " · " + a.hardware_model : ""), { class: "muted" }));
    title.appendChild(el("span", a.pressure.toLowerCase(), { class: "badge pressure-" + a.pressure.toLowerCase(), title: "memory pressure" }));
    card.appendChild(title);
    card.appendChild(Charts.memoryBar(a.budget));
    card.appendChild(el("p", Words.bytes(a.budget.schedulable_bytes) + " schedulable of " + Words.bytes(a.budget.total_bytes) +
      " · " + Words.percent(a.budget.utilisation) + " used · " + a.leases + " leases" + (a.available ? "" : " · not taking placements"), { class: "muted" }));
    grid.appendChild(card);
  }
  if (!overview.accelerators.length) grid.appendChild(el("p", "No accelerator with fresh telemetry.", { class: "muted" }));
  section.appendChild(grid);
  return section;
}

function deployments(fleet) {
  const section = panel("deployments", "Deployments");
  section.appendChild(table(fleet, [
    ["Capability", (d) => d.capability],
    ["Model", (d) => d.model_name],
    ["Channel", (d) => d.channel + (d.status !== d.channel ? " (" + d.status + ")" : "")],
    ["Replicas", (d) => d.replicas_min === d.replicas_max ? d.replicas_min : d.replicas_min + "–" + d.replicas_max, "number"],
    ["Residency", (d) => d.residency.replaceAll("_", " ")],
    ["Copies", (d) => d.copies.map((c) => c.accelerator_id + " " + c.state + " " + Words.bytes(c.measured_bytes)).join(", ") || "none"],
    ["Health", (d) => d.health + ": " + d.health_reason, "health"],
  ]));
  for (const [row, d] of Array.from(section.querySelectorAll("tr")).slice(1).map((tr, i) => [tr, fleet[i]])) {
    if (d) row.lastChild.classList.add("health-" + d.health);
  }
  return section;
}

function traffic(body) {
  const section = panel("traffic", "Traffic, last hour (per minute)");
  const grid = el("div", undefined, { class: "cards" });
  for (const c of body.capabilities) {
    const card = el("article", undefined, { class: "card" });
    card.appendChild(el("header", c.capability + " · " + Words.count(c.requests) + " requests"));
    const times = c.points.map((p) => p.at);
    card.appendChild(Charts.timeChart("requests per minute", times, [
      { label: "ok", className: "ok", bars: true, values: c.points.map((p) => p.requests - p.errors) },
      { label: "errors", className: "err", bars: true, values: c.points.map((p) => p.errors) },
    ], Words.count));
    card.appendChild(Charts.timeChart("latency", times, [
      { label: "p50", className: "p50", values: c.points.map((p) => p.p50_ms) },
      { label: "p95", className: "p95", values: c.points.map((p) => p.p95_ms) },
    ], Words.ms));
    grid.appendChild(card);
  }
  if (!body.capabilities.length) grid.appendChild(el("p", "No requests in the last hour.", { class: "muted" }));
  section.appendChild(grid);
  return section;
}

function placements(rows) {
  const section = panel("placements", "Recent placements");
  section.appendChild(table(rows, [
    ["When", (p) => Words.when(p.decided_at)],
    ["Deployment", (p) => p.deployment_id],
    ["Accelerator", (p) => p.accelerator_id || "–"],
    ["Decision", (p) => Words.verdict(p.verdict) + (p.decisions > 1 ? " ×" + p.decisions : "")],
    ["Why", (p) => Words.reasons(p.reason_codes), "wide"],
    ["Needs", (p) => Words.bytes(p.required_bytes), "number"],
  ]));
  return section;
}

function evictions(rows) {
  const section = panel("evictions", "Recent evictions");
  section.appendChild(table(rows, [
    ["When", (e) => Words.when(e.planned_at)],
    ["Accelerator", (e) => e.accelerator_id],
    ["Unloaded", (e) => (e.victims || []).map((v) => (typeof v === "string" ? v : v.deployment_id || JSON.stringify(v))).join(", "), "wide"],
    ["To make room for", (e) => e.for_deployment_id || "–"],
    ["Reclaimed", (e) => (e.reclaimed_bytes === null ? e.state : Words.bytes(e.reclaimed_bytes)), "number"],
  ]));
  return section;
}

function requests(rows, names) {
  const section = panel("requests", "Recent requests");
  section.appendChild(table(rows, [
    ["When", (r) => Words.when(r.finished_at || r.accepted_at)],
    ["Client", (r) => names.get(r.client_id) || r.client_id || "–"],
    ["Capability", (r) => r.capability],
    ["Outcome", (r) => r.status + (r.code ? " (" + r.code + ")" : "") + (r.cold ? ", cold" : "")],
    ["Total", (r) => Words.ms(r.total_ms), "number"],
    ["Queue", (r) => Words.ms(r.queue_ms), "number"],
    ["Engine", (r) => Words.ms(r.worker_inference_ms), "number"],
  ]));
  return section;
}

// A panel whose read failed says why, in place; the other panels still show.
function failed(id, title, error) {
  const section = panel(id, title);
  section.appendChild(el("p", error.message, { class: "error" }));
  return section;
}

async function showOverview(content) {
  const reads = {
    overview: read("/scheduler/overview"),
    fleet: read("/fleet"),
    traffic: read("/traffic?window_s=3600&step_s=60"),
    placements: read("/scheduler/placements?limit=15"),
    evictions: read("/scheduler/evictions?limit=10"),
    requests: read("/requests?limit=15"),
    clients: read("/clients"),
  };
  const settled = {};
  for (const [key, promise] of Object.entries(reads)) {
    settled[key] = await promise.then((answer) => answer, (error) => error);
  }
  const names = new Map(settled.clients instanceof Error ? [] : settled.clients.body.map((c) => [c.client_id, c.name]));
  const stale = Object.values(settled).map((s) => s.stale).filter(Boolean);
  const parts = [
    ["accelerators", "Accelerators", accelerators],
    ["deployments", "Deployments", deployments],
    ["traffic", "Traffic", traffic],
    ["placements", "Recent placements", placements],
    ["evictions", "Recent evictions", evictions],
    ["requests", "Recent requests", (rows) => requests(rows, names)],
  ];
  const keyOf = { accelerators: "overview", deployments: "fleet" };
  const sections = parts.map(([id, title, draw]) => {
    const answer = settled[keyOf[id] || id];
    return answer instanceof Error ? failed(id, title, answer) : draw(answer.body);
  });
  if (stale.length) sections.unshift(el("p", "The read model is behind: " + stale[0], { class: "banner error", role: "alert" }));
  content.replaceChildren(...sections);
}

// Any other read: a list of rows as a table of its scalar fields, an object as a list of facts.
function showTable(body, content) {
  const rows = Array.isArray(body) ? body : Object.values(body).find(Array.isArray) || [body];
  const columns = [];
  for (const row of rows) {
    for (const [key, value] of Object.entries(row || {})) {
      if (!columns.includes(key) && (value === null || typeof value !== "object")) columns.push(key);
    }
  }
  const format = (key, value) => {
    if (value === null || value === undefined) return "";
    if (typeof value === "number" && key.endsWith("_bytes")) return Words.bytes(value);
    if (typeof value === "number" && key.endsWith("_ms")) return Words.ms(value);
    if (typeof value === "number" && !Number.isInteger(value)) return String(Math.round(value * 1000) / 1000);
    if (key.endsWith("_at") && typeof value === "string") return Words.when(value);
    return String(value);
  };
  content.replaceChildren(table(rows.filter((r) => r && typeof r === "object"), columns.map((key) => [key.replaceAll("_", " "), (r) => format(key, r[key])])));
}

async function show(view) {
  current = view;
  for (const button of document.querySelectorAll("nav button")) {
    if (button.dataset.name === view.name) button.setAttribute("aria-current", "page");
    else button.removeAttribute("aria-current");
  }
  document.getElementById("about").textContent = view.about;
  const content = document.getElementById("content");
  if (!sessionStorage.getItem(TOKEN_KEY)) { setStatus("enter the operator token", true); return; }
  try {
    if (view === OVERVIEW) await showOverview(content);
    else showTable((await read(view.path)).body, content);
  } catch (error) {
    if (!(error instanceof ReadError)) throw error;
    setStatus(error.message, true);
    return;
  }
  document.body.dataset.loaded = view.name;
  setStatus("read at " + new Date().toLocaleTimeString());
}

function schedule() {
  clearInterval(timer);
  timer = document.getElementById("auto").checked ? setInterval(() => show(current), REFRESH_MS) : null;
}

document.addEventListener("DOMContentLoaded", () => {
  const nav = document.getElementById("views");
  for (const view of [OVERVIEW, ...VIEWS]) {
    const button = el("button", view.name, { type: "button", "data-name": view.name });
    button.addEventListener("click", () => show(view));
    nav.appendChild(button);
  }
  document.getElementById("login").addEventListener("submit", (event) => {
    event.preventDefault();
    const input = document.getElementById("token");
    sessionStorage.setItem(TOKEN_KEY, input.value.trim());
    input.value = "";
    show(current);
  });
  document.getElementById("forget").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    document.getElementById("content").replaceChildren();
    delete document.body.dataset.loaded;
    setStatus("token forgotten");
  });
  document.getElementById("refresh").addEventListener("click", () => show(current));
  document.getElementById("auto").addEventListener("change", schedule);
  schedule();
  show(current);
});
