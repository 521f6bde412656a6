// The console's words and units: bytes in MiB/GiB, durations in ms or s, times of day, and the
// scheduler's verdicts and reason codes as sentences. Pure functions, no DOM.
"use strict";

const Words = (() => {
  const BYTE_UNITS = ["B", "KiB", "MiB", "GiB", "TiB"];

  function bytes(value) {
    if (value === null || value === undefined) return "–";
    let size = Math.abs(value), unit = 0;
    while (size >= 1024 && unit < BYTE_UNITS.length - 1) { size /= 1024; unit += 1; }
    const digits = unit === 0 || size >= 100 ? 0 : 1;
    return (value < 0 ? "-" : "") + size.toFixed(digits) + " " + BYTE_UNITS[unit];
  }

  function ms(value) {
    if (value === null || value === undefined) return "–";
    if (value >= 10000) return (value / 1000).toFixed(0) + " s";
    if (value >= 1000) return (value / 1000).toFixed(1) + " s";
    if (value >= 10 || value === 0) return value.toFixed(0) + " ms";
    return value.toFixed(1) + " ms";
  }

  function count(value) {
    if (value === null || value === undefined) return "–";
    if (value >= 1e6) return (value / 1e6).toFixed(1) + " M";
    if (value >= 1e4) return (value / 1e3).toFixed(0) + " k";
    return String(Math.round(value));
  }

  // A count and its noun, singular for one: "1 event", "12 events".
  function counted(value, noun) {
    return count(value) + " " + noun + (value === 1 ? "" : "s");
  }

  function percent(fraction) {
    return fraction === null || fraction === undefined ? "–" : Math.round(fraction * 100) + " %";
  }

  // An ISO time, or Unix seconds: the time of day today, else the date and time.
  function when(value) {
    if (value === null || value === undefined || value === "") return "–";
    const date = typeof value === "number" ? new Date(value * 1000) : new Date(value);
    if (Number.isNaN(date.getTime())) return String(value);
    const today = new Date().toDateString() === date.toDateString();
    const time = date.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
    return today ? time : date.toLocaleDateString() + " " + time;
  }

  const VERDICTS = {
    ADMIT: "admitted",
    ADMIT_AFTER_EVICTION: "admitted after an eviction",
    QUEUE: "queued",
    REJECT_INSUFFICIENT_CAPACITY: "refused: not enough memory",
    REJECT_QUEUE_FULL: "refused: the queue is full",
    REJECT_DEADLINE: "refused: the deadline would pass",
    REJECT_NO_ELIGIBLE_ACCELERATOR: "refused: no eligible accelerator",
    REJECT_STATE_STALE: "refused: the scheduler's view is stale",
  };

  const REASONS = {
    RESIDENT_WARM: "the model was already loaded",
    COLD_LOAD: "the model had to be loaded",
    EVICTION_REQUIRED: "idle models had to be unloaded first",
    CO_RESIDENCY_EVICTION: "a model that cannot share the GPU had to be unloaded",
    ATTRIBUTION_UNKNOWN: "the GPU's memory use could not be attributed",
    RESIDENCY_LOADING: "the model is still loading",
    RESIDENCY_UNLOADING: "the model is being unloaded",
    WAITING_FOR_LEASES: "waiting for running requests to free memory",
    EVICTION_COOLDOWN: "a recent eviction or load is cooling down",
    INSUFFICIENT_SCHEDULABLE_VRAM: "not enough free GPU memory",
    INSUFFICIENT_VRAM_AFTER_EVICTION: "not enough GPU memory even after unloading idle models",
    EXCEEDS_ACCELERATOR_CAPACITY: "the model is larger than the GPU",
    PRESSURE_CRITICAL: "the GPU's memory pressure is critical",
    CO_RESIDENCY_UNSAFE: "the models are not safe together on one GPU",
    QUEUE_FULL: "the queue is full",
    DEADLINE_EXCEEDED: "the request's deadline would pass",
    NO_ELIGIBLE_NODE: "no node may run it",
    RUNTIME_UNHEALTHY: "the runtime is unhealthy",
    SCHEDULER_STATE_STALE: "no fresh telemetry from the node",
    RESIDENCY_LOAD_FAILED: "its last load there failed",
    ENVELOPE_CLASS_UNMEASURED: "its memory was never measured on this kind of GPU",
  };

  function verdict(code) {
    return VERDICTS[code] || String(code || "").toLowerCase().replaceAll("_", " ");
  }

  function reasons(codes) {
    if (!Array.isArray(codes) || !codes.length) return "";
    return codes.map((code) => REASONS[code] || String(code).toLowerCase().replaceAll("_", " ")).join("; ");
  }

  return { bytes, ms, count, counted, percent, when, verdict, reasons };
})();
