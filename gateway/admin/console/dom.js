// The console's DOM helpers: elements with text (never parsed as HTML), tables and panels.
"use strict";

const Dom = (() => {
  function el(tag, text, attributes) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    for (const [key, value] of Object.entries(attributes || {})) node.setAttribute(key, value);
    return node;
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

  function tablePanel(id, title, rows, columns) {
    const section = panel(id, title);
    section.appendChild(table(rows, columns));
    return section;
  }

  // A panel of cards, one drawn per item, wrapping to the width; `empty` said when there are none.
  function cards(id, title, items, draw, empty) {
    const section = panel(id, title);
    const grid = el("div", undefined, { class: "cards" });
    for (const item of items) grid.appendChild(draw(item));
    if (!items.length) grid.appendChild(el("p", empty, { class: "muted" }));
    section.appendChild(grid);
    return section;
  }

  return { el, table, panel, cards, tablePanel };
})();
