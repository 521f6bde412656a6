// The overview an operator keeps open: memory per accelerator, deployments and their health,
// traffic per capability, the read model's standing, recent placements, evictions and requests.
// Each panel is drawn from one admin read; a panel whose read failed says why, in place.
"use strict";

const Overview = (() => {
  const { el, table, panel, cards, tablePanel } = Dom;

  function accelerator(a) {
    const card = el("article", undefined, { class: "card accelerator" });
    const title = el("header");
    title.append(el("strong", a.accelerator_id), el("span", a.node_id + (a.hardware_model ? " · " + a.hardware_model : ""), { class: "muted" }));
    title.appendChild(el("span", a.pressure.toLowerCase(), { class: "badge pressure-" + a.pressure.toLowerCase(), title: "memory pressure" }));
    card.appendChild(title);
    card.appendChild(Charts.memoryBar(a.budget));
    card.appendChild(el("p", Words.bytes(a.budget.schedulable_bytes) + " schedulable of " + Words.bytes(a.budget.total_bytes) +
      " · " + Words.percent(a.budget.utilisation) + " used · " + a.leases + " leases" + (a.available ? "" : " · not taking placements"), { class: "muted" }));
    return card;
  }

  function accelerators(overview) {
    return cards("accelerators", "Accelerators", overview.accelerators, accelerator, "No accelerator with fresh telemetry.");
  }

  function deployments(fleet) {
    const section = tablePanel("deployments", "Deployments", fleet, [
      ["Capability", (d) => d.capability],
      ["Model", (d) => d.model_name],
      ["Channel", (d) => d.channel + (d.status !== d.channel ? " (" + d.status + ")" : "")],
      ["Replicas", (d) => d.replicas_min === d.replicas_max ? d.replicas_min : d.replicas_min + "–" + d.replicas_max, "number"],
      ["Residency", (d) => d.residency.replaceAll("_", " ")],
      ["Copies", (d) => d.copies.map((c) => c.accelerator_id + " " + c.state + " " + Words.bytes(c.measured_bytes)).join(", ") || "none"],
      ["Health", (d) => d.health + ": " + d.health_reason, "health"],
    ]);
    for (const [row, d] of Array.from(section.querySelectorAll("tr")).slice(1).map((tr, i) => [tr, fleet[i]])) {
      if (d) row.lastChild.classList.add("health-" + d.health);
    }
    return section;
  }

  function capabilityTraffic(c) {
    const card = el("article", undefined, { class: "card" });
    card.appendChild(el("header", c.capability + " · " + Words.counted(c.requests, "request")));
    const times = c.points.map((p) => p.at);
    card.appendChild(Charts.timeChart("requests per minute", times, [
      { label: "ok", className: "ok", bars: true, values: c.points.map((p) => p.requests - p.errors) },
      { label: "errors", className: "err", bars: true, values: c.points.map((p) => p.errors) },
    ], Words.count));
    card.appendChild(Charts.timeChart("latency", times, [
      { label: "p50", className: "p50", values: c.points.map((p) => p.p50_ms) },
      { label: "p95", className: "p95", values: c.points.map((p) => p.p95_ms) },
    ], Words.ms));
    return card;
  }

  function traffic(body) {
    return cards("traffic", "Traffic, last hour (per minute)", body.capabilities, capabilityTraffic, "No requests in the last hour.");
  }

  function placements(rows) {
    return tablePanel("placements", "Recent placements", rows, [
      ["When", (p) => Words.when(p.decided_at)],
      ["Deployment", (p) => p.deployment_id],
      ["Accelerator", (p) => p.accelerator_id || "–"],
      ["Decision", (p) => Words.verdict(p.verdict) + (p.decisions > 1 ? " ×" + p.decisions : "")],
      ["Why", (p) => Words.reasons(p.reason_codes) || "–", "wide"],
      ["Needs", (p) => Words.bytes(p.required_bytes), "number"],
    ]);
  }

  function evictions(rows) {
    return tablePanel("evictions", "Recent evictions", rows, [
      ["When", (e) => Words.when(e.planned_at)],
      ["Accelerator", (e) => e.accelerator_id],
      ["Unloaded", (e) => (e.victims || []).map((v) => (typeof v === "string" ? v : v.deployment_id || JSON.stringify(v))).join(", "), "wide"],
      ["To make room for", (e) => e.for_deployment_id || "–"],
      ["Reclaimed", (e) => (e.reclaimed_bytes === null ? e.state : Words.bytes(e.reclaimed_bytes)), "number"],
    ]);
  }

  function requests(rows, names) {
    return tablePanel("requests", "Recent requests", rows, [
      ["When", (r) => Words.when(r.finished_at || r.accepted_at)],
      ["Client", (r) => names.get(r.client_id) || r.client_id || "–"],
      ["Capability", (r) => r.capability],
      ["Outcome", (r) => r.status + (r.code ? " (" + r.code + ")" : "") + (r.cold ? ", cold" : "")],
      ["Total", (r) => Words.ms(r.total_ms), "number"],
      ["Queue", (r) => Words.ms(r.queue_ms), "number"],
      ["Engine", (r) => Words.ms(r.worker_inference_ms), "number"],
    ]);
  }

  // A panel whose read failed says why, in place; the other panels still show.
  function failed(id, title, error) {
    const section = panel(id, title);
    section.appendChild(el("p", error.message, { class: "error" }));
    return section;
  }

  // The read model's standing per stream; a halted projection in red with its reason and the way out.
  function projection(body) {
    const section = panel("projection", "Read model");
    for (const halt of body.halted) {
      section.appendChild(el("p", "Halted at " + halt.stream + " sequence " + halt.seq + " (" + halt.event_type + "): " + halt.reason +
        ". Fix the cause and start the projector again; it resumes at that event (README: the projection).", { class: "banner error", role: "alert" }));
    }
    const halted = new Set(body.halted.map((halt) => halt.stream));
    section.appendChild(table(body.streams, [
      ["Stream", (s) => s.stream + (halted.has(s.stream) ? " (halted)" : "")],
      ["Applied through", (s) => Words.count(s.checkpoint), "number"],
      ["Behind", (s) => Words.counted(s.lag, "event"), "number"],
      ["Last applied", (s) => Words.when(s.projected_at)],
      ["Never read", (s) => (s.gone_unread ? Words.counted(s.gone_unread, "event") + " aged out" : "–")],
    ]));
    return section;
  }

  async function showOverview(content, read) {
    const reads = {
      overview: read("/scheduler/overview"),
      fleet: read("/fleet"),
      traffic: read("/traffic?window_s=3600&step_s=60"),
      placements: read("/scheduler/placements?limit=15"),
      evictions: read("/scheduler/evictions?limit=10"),
      requests: read("/requests?limit=15"),
      clients: read("/clients"),
      projection: read("/projection"),
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
      ["projection", "Read model", projection],
    ];
    const keyOf = { accelerators: "overview", deployments: "fleet" };
    const sections = parts.map(([id, title, draw]) => {
      const answer = settled[keyOf[id] || id];
      return answer instanceof Error ? failed(id, title, answer) : draw(answer.body);
    });
    if (stale.length) sections.unshift(el("p", "The read model is stale: " + stale[0], { class: "banner error", role: "alert" }));
    content.replaceChildren(...sections);
  }

  return { show: showOverview };
})();
