// The console's pictures, drawn by this page alone (no library, works offline): an accelerator's
// stacked memory bar and a small SVG chart of a series over time. Every label is set as text.
"use strict";

const Charts = (() => {
  const SVG = "http://www.w3.org/2000/svg";

  function node(tag, attributes, text) {
    const element = document.createElementNS(SVG, tag);
    for (const [key, value] of Object.entries(attributes || {})) element.setAttribute(key, String(value));
    if (text !== undefined) element.textContent = text;
    return element;
  }

  // The parts of an accelerator's memory, in the order they are stacked, from its budget.
  function memoryParts(budget) {
    const total = Math.max(budget.total_bytes || 0, 1);
    const used = budget.resident_bytes + budget.leased_bytes + budget.safety_reserve_bytes + budget.external_bytes;
    return {
      total,
      parts: [
        { key: "resident", label: "resident", bytes: budget.resident_bytes },
        { key: "leased", label: "leased", bytes: budget.leased_bytes },
        { key: "reserve", label: "reserve", bytes: budget.safety_reserve_bytes },
        { key: "external", label: "external", bytes: budget.external_bytes },
        { key: "free", label: "free", bytes: Math.max(total - used, 0) },
      ],
    };
  }

  // A horizontal bar of the parts (widths as shares of the total), and a legend naming each.
  function memoryBar(budget) {
    const { total, parts } = memoryParts(budget);
    const wrap = document.createElement("div");
    wrap.className = "membar-wrap";
    const bar = document.createElement("div");
    bar.className = "membar";
    bar.setAttribute("role", "img");
    bar.setAttribute("aria-label", parts.map((p) => p.label + " " + Words.bytes(p.bytes)).join(", "));
    const legend = document.createElement("ul");
    legend.className = "legend";
    for (const part of parts) {
      const share = Math.min(Math.max(part.bytes / total, 0), 1);
      const piece = document.createElement("span");
      piece.className = "part " + part.key;
      piece.style.width = (share * 100).toFixed(2) + "%";
      piece.title = part.label + ": " + Words.bytes(part.bytes);
      bar.appendChild(piece);
      const item = document.createElement("li");
      const swatch = document.createElement("span");
      swatch.className = "swatch " + part.key;
      item.append(swatch, part.label + " " + Words.bytes(part.bytes));
      legend.appendChild(item);
    }
    wrap.append(bar, legend);
    return wrap;
  }

  // A chart of `series` ({label, className, values: [number|null], bars?}) over `times` (Unix s).
  // Bars for counts, lines for latencies; the y axis starts at 0 and is labelled with `format`.
  function timeChart(title, times, series, format) {
    const width = 420, height = 140, left = 56, right = 8, top = 18, bottom = 22;
    const innerW = width - left - right, innerH = height - top - bottom;
    const svg = node("svg", { viewBox: `0 0 ${width} ${height}`, class: "chart", role: "img", "aria-label": title });
    svg.appendChild(node("text", { x: left, y: 12, class: "chart-title" }, title));
    const values = series.flatMap((s) => s.values).filter((v) => v !== null && v !== undefined);
    const peak = Math.max(...values, 0) || 1;
    const x = (i) => left + (times.length <= 1 ? innerW / 2 : (i / (times.length - 1)) * innerW);
    const y = (v) => top + innerH - (v / peak) * innerH;
    for (const fraction of [0, 0.5, 1]) {
      const at = top + innerH - fraction * innerH;
      svg.appendChild(node("line", { x1: left, x2: width - right, y1: at, y2: at, class: "grid" }));
      svg.appendChild(node("text", { x: left - 4, y: at + 4, class: "axis", "text-anchor": "end" }, format(peak * fraction)));
    }
    if (times.length) {
      svg.appendChild(node("text", { x: left, y: height - 6, class: "axis" }, Words.when(times[0])));
      svg.appendChild(node("text", { x: width - right, y: height - 6, class: "axis", "text-anchor": "end" }, Words.when(times[times.length - 1])));
    }
    const slot = innerW / Math.max(times.length, 1);
    for (const s of series) {
      if (s.bars) {
        s.values.forEach((v, i) => {
          if (!v) return;
          const barW = Math.max(slot * 0.8, 1);
          svg.appendChild(node("rect", { x: x(i) - barW / 2, y: y(v), width: barW, height: top + innerH - y(v), class: s.className }));
        });
        continue;
      }
      let path = "";
      s.values.forEach((v, i) => {
        if (v === null || v === undefined) return;
        path += (path && s.values[i - 1] !== null && s.values[i - 1] !== undefined ? " L" : " M") + x(i).toFixed(1) + " " + y(v).toFixed(1);
        svg.appendChild(node("circle", { cx: x(i), cy: y(v), r: 2, class: s.className }));
      });
      if (path) svg.appendChild(node("path", { d: path.trim(), class: "line " + s.className }));
    }
    const key = node("g", { class: "chart-key" });
    series.forEach((s, i) => {
      const at = width - right - (series.length - i) * 70;
      key.appendChild(node("rect", { x: at, y: 4, width: 10, height: 10, class: s.className }));
      key.appendChild(node("text", { x: at + 14, y: 13, class: "axis" }, s.label));
    });
    svg.appendChild(key);
    return svg;
  }

  return { memoryParts, memoryBar, timeChart };
})();
