// The operator console: an overview to keep open (memory per accelerator, deployments and their
// health, traffic per capability, recent placements, evictions and requests) and the admin API's
// other reads as tables. Data is only ever set as text (never parsed as HTML); the token stays in
// this tab (sessionStorage) and is sent to this gateway alone.
"use strict";

const { el, table } = Dom;

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
    if (view === OVERVIEW) await Overview.show(content, read);
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
