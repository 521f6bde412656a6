// The operator console: read-only views of the admin API (/admin/v1), rendered as tables.
// Data is only ever set as text (never parsed as HTML), and the token stays in this tab.
"use strict";

const API = "/admin/v1";
const TOKEN_KEY = "modelforge-operator-token";
const REFRESH_MS = 5000;

// The views, each one GET of the admin API (a test checks that every path is one).
const VIEWS = [
  { name: "Accelerators", path: "/scheduler/overview", about: "Budgets per accelerator: total, used, resident, leased, reserve, schedulable, pressure." },
  { name: "Nodes", path: "/nodes", about: "Registered nodes, their accelerators and liveness." },
  { name: "Deployments", path: "/deployments", about: "Stable deployments and experiments with their residency policy." },
  { name: "Requests", path: "/requests?limit=50", about: "The latest requests with their outcome and latency breakdown (no content is ever stored)." },
  { name: "Placements", path: "/scheduler/placements?limit=50", about: "The scheduler's latest decisions." },
  { name: "Scheduler", path: "/scheduler/metrics", about: "Scheduler counters and gauges." },
  { name: "Policy", path: "/scheduler/policy", about: "The scheduler policy in force." },
  { name: "Clients", path: "/clients", about: "Service clients, their scopes, limits and credentials (never keys)." },
  { name: "Approvals", path: "/approvals", about: "Lab and production approvals, each bound to an evidence fingerprint." },
  { name: "Candidates", path: "/candidates", about: "Candidates and their probes." },
  { name: "Projects", path: "/projects", about: "Projects, their channel bindings and clients." },
  { name: "Projection", path: "/projection", about: "The read model's checkpoints, lag and gaps." },
];

let current = VIEWS[0];
let timer = null;

function el(tag, text, attributes) {
  const node = document.createElement(tag);
  if (text !== undefined) node.textContent = text;
  for (const [key, value] of Object.entries(attributes || {})) node.setAttribute(key, value);
  return node;
}

function formatBytes(value) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let size = Math.abs(value), unit = 0;
  while (size >= 1024 && unit < units.length - 1) { size /= 1024; unit += 1; }
  return (value < 0 ? "-" : "") + size.toFixed(unit ? 1 : 0) + " " + units[unit];
}

// One value as a node: objects as compact JSON, byte counts readable (exact in the tooltip).
function valueNode(key, value) {
  if (value === null || value === undefined) return el("span", "");
  if (typeof value === "object") {
    const text = JSON.stringify(value);
    return el("code", text.length > 400 ? text.slice(0, 400) + "…" : text, { title: text });
  }
  if (typeof value === "number" && key.endsWith("_bytes")) return el("span", formatBytes(value), { title: value + " bytes" });
  return el("span", String(value));
}

function cell(key, value) {
  const td = el("td");
  if (typeof value === "number") td.className = "number";
  td.appendChild(valueNode(key, value));
  return td;
}

function isPlainObject(value) {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

// A nested object's fields become columns of their own (a row's budget, say); a field that
// repeats one of the row's own with the same value is left out.
function flatten(row) {
  const flat = {};
  for (const [key, value] of Object.entries(row)) {
    if (!isPlainObject(value)) { flat[key] = value; continue; }
    for (const [inner, field] of Object.entries(value)) {
      if (inner in row && row[inner] === field) continue;
      flat[inner in flat || inner in row ? key + "." + inner : inner] = field;
    }
  }
  return flat;
}

function table(records) {
  const rows = records.map(flatten);
  const columns = [];
  for (const row of rows) for (const key of Object.keys(row)) if (!columns.includes(key)) columns.push(key);
  const t = el("table");
  const head = el("tr");
  for (const column of columns) head.appendChild(el("th", column));
  t.appendChild(head);
  for (const row of rows) {
    const tr = el("tr");
    for (const column of columns) tr.appendChild(cell(column, row[column]));
    t.appendChild(tr);
  }
  return t;
}

function isRows(value) {
  return Array.isArray(value) && value.length > 0 && value.every(isPlainObject);
}

function facts(fields) {
  const list = el("dl");
  for (const [key, field] of Object.entries(fields)) {
    list.appendChild(el("dt", key));
    const dd = el("dd");
    dd.appendChild(valueNode(key, field));
    list.appendChild(dd);
  }
  return list;
}

// Lists of objects become tables, objects of objects too (keyed by id); an object's other
// fields a definition list, nested objects one of their own.
function render(value, into) {
  if (isRows(value)) { into.appendChild(table(value)); return; }
  if (!isPlainObject(value)) { into.appendChild(el("p", Array.isArray(value) && !value.length ? "(none)" : JSON.stringify(value))); return; }
  const scalars = {};
  for (const [key, field] of Object.entries(value)) {
    if (isRows(field)) {
      into.appendChild(el("h2", key));
      into.appendChild(table(field));
    } else if (isPlainObject(field) && Object.keys(field).length && Object.values(field).every(isPlainObject)) {
      into.appendChild(el("h2", key));
      into.appendChild(table(Object.entries(field).map(([id, row]) => ({ id, ...row }))));
    } else if (isPlainObject(field)) {
      into.appendChild(el("h2", key));
      into.appendChild(facts(field));
    } else {
      scalars[key] = field;
    }
  }
  if (Object.keys(scalars).length) into.prepend(facts(scalars));
}

function setStatus(text, isError) {
  const status = document.getElementById("status");
  status.textContent = text;
  status.className = isError ? "error" : "";
}

async function show(view) {
  current = view;
  for (const button of document.querySelectorAll("nav button")) {
    if (button.dataset.path === view.path) button.setAttribute("aria-current", "page");
    else button.removeAttribute("aria-current");
  }
  document.getElementById("about").textContent = view.about;
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (!token) { setStatus("no operator token", true); return; }
  setStatus("loading " + view.path + " …");
  let response;
  try {
    response = await fetch(API + view.path, { headers: { Authorization: "Bearer " + token }, cache: "no-store" });
  } catch (error) {
    setStatus("the gateway did not answer: " + error, true);
    return;
  }
  const body = await response.json().catch(() => null);
  if (!response.ok) {
    const problem = body && body.error ? body.error.code + ": " + body.error.message : response.status + " " + response.statusText;
    setStatus(problem, true);
    return;
  }
  const content = document.getElementById("content");
  content.replaceChildren();
  render(body, content);
  setStatus("read " + new Date().toLocaleTimeString() + " (" + (response.headers.get("x-request-id") || "") + ")");
}

function schedule() {
  clearInterval(timer);
  timer = document.getElementById("auto").checked ? setInterval(() => show(current), REFRESH_MS) : null;
}

document.addEventListener("DOMContentLoaded", () => {
  const nav = document.getElementById("views");
  for (const view of VIEWS) {
    const button = el("button", view.name, { type: "button", "data-path": view.path });
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
    setStatus("token forgotten");
  });
  document.getElementById("refresh").addEventListener("click", () => show(current));
  document.getElementById("auto").addEventListener("change", schedule);
  show(current);
});
