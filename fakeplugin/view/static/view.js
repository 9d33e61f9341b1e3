// The fleet page: the summary and a page of nodes from the JSON endpoints, fetched again on each
// Server-Sent Event the server sends when its watches saw a change. No framework, no external fetch.
"use strict";

const STATES = ["free", "allocated", "tainted", "unhealthy"];
const view = { offset: 0, detail: "", version: -1, busy: false, again: false };
const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "class") node.className = value;
    else if (key.startsWith("data-")) node.setAttribute(key, value);
    else if (key === "title") node.title = value;
    else if (key === "onclick") node.onclick = value;
  }
  for (const child of children) if (child !== null && child !== undefined) node.append(child);
  return node;
}

async function getJSON(path) {
  const response = await fetch(path, { cache: "no-store" });
  if (!response.ok) throw new Error(`${path}: ${response.status}`);
  return response.json();
}

function bar(states) {
  const total = STATES.reduce((sum, s) => sum + (states[s] || 0), 0) || 1;
  const node = el("div", { class: "bar", title: STATES.map((s) => `${s} ${states[s] || 0}`).join(", ") });
  for (const s of STATES) {
    if (states[s]) {
      const part = el("span", { class: s });
      part.style.width = `${(100 * states[s]) / total}%`;
      node.append(part);
    }
  }
  return el("div", {}, node, el("span", { class: "counts" }, STATES.map((s) => `${states[s] || 0} ${s}`).join(" · ")));
}

function fillSelect(select, values) {
  const current = select.value;
  select.replaceChildren(el("option", {}, "any"), ...values.map((v) => el("option", {}, v)));
  select.options[0].value = "";
  select.value = values.includes(current) ? current : "";
}

function renderSummary(summary) {
  const t = summary.totals;
  $("totals").textContent = `${t.nodes} nodes (${t.notReady} not ready) · ${t.gpus} GPUs · ${t.partitions} MIG partitions · ` +
    STATES.map((s) => `${t.states[s]} ${s}`).join(" · ");
  $("grouped-by").textContent = summary.groupedBy;
  const rows = summary.groups.map((g) => {
    const row = el("tr", { class: "pick" + ($("f-group").value === g.name ? " picked" : ""), "data-group": g.name },
      el("td", {}, g.name), el("td", {}, String(g.nodes)), el("td", {}, String(g.gpus)), el("td", {}, String(g.partitions)), el("td", {}, bar(g.states)));
    row.onclick = () => { $("f-group").value = $("f-group").value === g.name ? "" : g.name; view.offset = 0; refresh(); };
    return row;
  });
  $("groups").tBodies[0].replaceChildren(...rows);
  fillSelect($("f-group"), summary.groups.map((g) => g.name));
  fillSelect($("f-rack"), summary.racks.map((r) => r.clique));
  $("racks-section").hidden = summary.racks.length === 0 && summary.domains.length === 0;
  $("racks").tBodies[0].replaceChildren(...summary.racks.map((r) => {
    const row = el("tr", { class: "pick", "data-rack": r.clique }, el("td", {}, r.clique), el("td", {}, String(r.nodes)),
      el("td", {}, String(r.gpus)), el("td", {}, bar(r.states)),
      el("td", {}, r.domains.map((d) => `${d.namespace}/${d.name} (${d.status})`).join(", ") || "—"));
    row.onclick = () => { $("f-rack").value = $("f-rack").value === r.clique ? "" : r.clique; view.offset = 0; refresh(); };
    return row;
  }));
  $("domains").tBodies[0].replaceChildren(...summary.domains.map((d) => el("tr", { "data-domain": `${d.namespace}/${d.name}` },
    el("td", {}, `${d.namespace}/${d.name}`), el("td", {}, d.status), el("td", {}, `${d.nodes.length} of ${d.numNodes}`),
    el("td", {}, d.cliques.map((c) => `${c.clique}: ${c.daemons.filter((x) => x.status === "Ready").length}/${c.daemons.length} Ready`).join("; ") || "—"))));
}

function who(cell) {
  const pods = cell.claims.flatMap((c) => c.pods.map((p) => p.name));
  return pods.length ? pods.join(", ") : cell.claims.map((c) => c.name).join(", ");
}

function fault(cell) {
  return cell.taints.map((t) => t.key.split("/").pop() + (t.value ? ` ${t.value}` : "")).join(", ");
}

function title(node, cell) {
  const lines = [`${node}/${cell.name}${cell.profile ? " (" + cell.profile + ")" : ""}: ${cell.state}`, cell.model];
  for (const c of cell.claims) lines.push(`claim ${c.namespace}/${c.name}` + (c.pods.length ? ": " + c.pods.map((p) => `${p.name} ${p.phase}`).join(", ") : ""));
  for (const t of cell.taints) lines.push(`taint ${t.key}${t.value ? "=" + t.value : ""}:${t.effect}`);
  if (cell.message) lines.push(cell.message);
  return lines.filter(Boolean).join("\n");
}

// A GPU: its name, who has it, its taints; a MIG partition: a small square, labelled only when in use
// or tainted (a DynamicMIG GPU publishes every placement it could make).
function cellOf(node, cell, mig) {
  const split = cell.partitions && cell.partitions.length;
  const label = mig ? (cell.state === "free" ? "" : cell.profile || cell.name) : cell.name;
  return el("div", { class: `cell ${cell.state}${mig ? " mig" : ""}${split ? " split" : ""}`, "data-node": node, "data-device": cell.name, "data-state": cell.state, title: title(node, cell) },
    label,
    who(cell) ? el("span", { class: "pod" }, who(cell)) : null,
    cell.taints.length ? el("span", { class: "fault" }, fault(cell)) : null,
    split ? el("div", { class: "parts" }, ...cell.partitions.map((p) => cellOf(node, p, true))) : null);
}

function nodeCard(node) {
  const badges = [node.ready ? null : el("span", { class: "badge bad" }, "NotReady"), node.simulated ? el("span", { class: "badge" }, "kwok") : null];
  return el("div", { class: "node" + (node.ready ? "" : " notready"), "data-node": node.name, onclick: () => openDetail(node.name) },
    el("h3", {}, el("span", {}, node.name, " ", ...badges.filter(Boolean)), el("small", { title: node.group }, node.rack || node.model)),
    node.gpus.length ? el("div", { class: "cells" }, ...node.gpus.map((g) => cellOf(node.name, g, false))) : el("small", { class: "counts" }, "no GPUs"));
}

function renderPage(page) {
  $("grid").replaceChildren(...page.nodes.map(nodeCard));
  const last = Math.min(page.offset + page.nodes.length, page.total);
  $("range").textContent = page.total ? ` ${page.offset + 1}–${last} of ${page.total} nodes ` : " no nodes match ";
  $("prev").disabled = page.offset === 0;
  $("next").disabled = last >= page.total;
}

function renderDetail(node) {
  $("detail").hidden = false;
  $("detail-name").textContent = node.name;
  const rows = [];
  const add = (cell, indent) => rows.push(el("tr", { class: cell.state, "data-detail-device": cell.name },
    el("td", {}, (indent ? "↳ " : "") + cell.name + (cell.profile ? ` (${cell.profile})` : "")),
    el("td", {}, el("span", { class: `cell ${cell.state}` }, cell.state)),
    el("td", {}, cell.claims.map((c) => `${c.namespace}/${c.name}` + (c.pods.length ? " → " + c.pods.map((p) => `${p.name} (${p.phase})`).join(", ") : "")).join("; ")),
    el("td", {}, [cell.taints.map((t) => `${t.key}${t.value ? "=" + t.value : ""}:${t.effect}`).join(", "), cell.message].filter(Boolean).join(" — "))));
  for (const g of node.gpus) { add(g, false); for (const p of g.partitions) add(p, true); }
  for (const c of node.channels) add(c, false);
  const facts = [`group ${node.group}`, `model ${node.model}`, node.rack ? `clique ${node.rack}` : "", node.ready ? "Ready" : "NotReady", node.simulated ? "simulated (kwok)" : "kubelet node"];
  $("detail-body").replaceChildren(el("p", { class: "counts" }, facts.filter(Boolean).join(" · ")),
    el("table", {}, el("thead", {}, el("tr", {}, el("th", {}, "device"), el("th", {}, "state"), el("th", {}, "claim → pods"), el("th", {}, "taints, health"))), el("tbody", {}, ...rows)));
}

async function openDetail(name) {
  view.detail = name;
  try { renderDetail(await getJSON(`api/nodes/${encodeURIComponent(name)}`)); } catch (e) { view.detail = ""; $("detail").hidden = true; }
}

function pageQuery() {
  const params = new URLSearchParams({ offset: view.offset, limit: $("f-limit").value });
  for (const [key, id] of [["state", "f-state"], ["group", "f-group"], ["rack", "f-rack"], ["q", "f-q"]]) if ($(id).value) params.set(key, $(id).value);
  return `api/nodes?${params}`;
}

// One refresh at a time; a change that comes meanwhile runs one more after it.
async function refresh() {
  if (view.busy) { view.again = true; return; }
  view.busy = true;
  try {
    const [summary, page] = await Promise.all([getJSON("api/summary"), getJSON(pageQuery())]);
    renderSummary(summary);
    renderPage(page);
    if (view.detail) await openDetail(view.detail);
    view.version = page.version;
    document.body.dataset.version = String(page.version);
  } catch (e) {
    $("live").textContent = `error: ${e.message}`;
  } finally {
    view.busy = false;
    if (view.again) { view.again = false; refresh(); }
  }
}

function listen() {
  const events = new EventSource("api/events");
  events.addEventListener("change", (e) => {
    $("live").className = "live on";
    $("live").textContent = `live · v${JSON.parse(e.data).version}`;
    refresh();
  });
  events.onerror = () => { $("live").className = "live off"; $("live").textContent = "reconnecting"; };
}

for (const id of ["f-state", "f-group", "f-rack", "f-limit"]) $(id).onchange = () => { view.offset = 0; refresh(); };
$("f-q").oninput = () => { view.offset = 0; refresh(); };
$("prev").onclick = () => { view.offset = Math.max(0, view.offset - Number($("f-limit").value)); refresh(); };
$("next").onclick = () => { view.offset += Number($("f-limit").value); refresh(); };
$("close-detail").onclick = () => { view.detail = ""; $("detail").hidden = true; };
listen();
