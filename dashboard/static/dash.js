// hermesd dashboard: live updates by server-sent events (/live), no framework, no build step.
// Parts of a page marked data-live="URL" data-topics="a b" are fetched again from URL when the
// server says one of their topics changed (at most one request in flight per part); the jobs
// table (data-rows) takes its changed rows as HTML; a job's log (data-log) is followed; a form
// marked "confirm" asks its data-confirm question before it is sent.
"use strict";
(function () {
  const parts = Array.from(document.querySelectorAll("[data-live]"));
  const table = document.querySelector("table[data-rows] tbody");
  const busy = new Map();

  function reload(el) {
    if (busy.get(el)) { busy.set(el, "again"); return; }
    busy.set(el, true);
    fetch(el.dataset.live, {credentials: "same-origin"}).then(r => r.ok ? r.text() : null).then(html => {
      if (html !== null && !el.contains(document.activeElement)) {
        const open = new Set(Array.from(el.querySelectorAll("details[open]")).map(d => d.textContent.slice(0, 80)));
        el.innerHTML = html;
        el.querySelectorAll("details").forEach(d => { if (open.has(d.textContent.slice(0, 80))) d.open = true; });
        confirmForms(el);
      }
    }).catch(() => {}).finally(() => {
      const again = busy.get(el) === "again";
      busy.delete(el);
      if (again) reload(el);
    });
  }

  function placeRow(row) {
    const tpl = document.createElement("tbody");
    tpl.innerHTML = row.html.trim();
    const tr = tpl.firstElementChild;
    if (!tr) return;
    const depthOf = el => Number(el.dataset.depth || 0);
    const indent = (el, depth) => {
      el.dataset.depth = depth;
      const cell = el.firstElementChild;
      cell.className = cell.className.replace(/\bd\d\b/, "") + " d" + Math.min(depth, 9);
    };
    const old = document.getElementById("job-" + row.id);
    if (old) { indent(tr, depthOf(old)); old.replaceWith(tr); return; }
    const parent = row.parent && document.getElementById("job-" + row.parent);
    if (parent && table.contains(parent)) {
      indent(tr, depthOf(parent) + 1);
      parent.after(tr);
    } else if (!row.parent) {
      table.prepend(tr);
    } else {
      return;
    }
    const none = document.getElementById("no-jobs");
    if (none) none.remove();
  }

  function confirmForms(root) {
    root.querySelectorAll("form.confirm").forEach(f => {
      if (f.dataset.armed) return;
      f.dataset.armed = "1";
      f.addEventListener("submit", e => { if (!window.confirm(f.dataset.confirm)) e.preventDefault(); });
    });
  }

  if (parts.length || table) {
    const query = table ? "?rows=1&" + location.search.replace(/^\?/, "") : "";
    const source = new EventSource("/live" + query);
    // what changed between this page's rendering and its subscription: its live parts again
    source.addEventListener("hello", e => {
      const seq = JSON.parse(e.data).seq;
      if (seq > Number(document.body.dataset.seq || 0)) parts.forEach(reload);
      document.body.dataset.seq = seq;
    });
    source.addEventListener("refresh", e => {
      const topics = new Set(JSON.parse(e.data));
      parts.forEach(el => { if (el.dataset.topics.split(" ").some(t => t && topics.has(t))) reload(el); });
      const down = document.getElementById("down");
      if (down && topics.has("status")) down.remove();
    });
    if (table) source.addEventListener("rows", e => JSON.parse(e.data).forEach(placeRow));
  }
  confirmForms(document);

  const log = document.querySelector("[data-log]");
  if (log) {
    let offset = -32768;
    const follow = () => {
      fetch(log.dataset.log + "?offset=" + offset, {credentials: "same-origin"}).then(r => r.json()).then(a => {
        if (a.data) {
          const atEnd = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
          log.textContent = (log.textContent + a.data).slice(-200000);
          if (atEnd) log.scrollTop = log.scrollHeight;
        }
        if (typeof a.offset === "number") offset = a.offset;
        if (!a.done || a.data) setTimeout(follow, 1000);
      }).catch(() => setTimeout(follow, 3000));
    };
    follow();
  }
})();
