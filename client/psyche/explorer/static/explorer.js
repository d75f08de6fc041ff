// The explorer's page: a hash router over the read-only /api/, charts by uPlot, and a
// server-sent event stream that re-renders the current view whenever the indexer stores something.
// Serving a stored database's history (no indexer; /api/explorer says live: false), the page says
// so and shows times as dates, not as "… ago" or "in progress".
"use strict";
const main = document.getElementById("main");
const error = document.getElementById("error");
const esc = (v) => String(v ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
const api = async (path) => { const r = await fetch("/api/" + path); if (!r.ok) throw new Error(path + ": HTTP " + r.status); return r.json(); };
const ago = (t) => t ? Math.max(0, Math.round(Date.now() / 1000 - t)) + " s" : "—";
const when = (t) => t ? new Date(t * 1000).toLocaleTimeString() : "—";
const num = (v) => (v === null || v === undefined) ? "—" : Number(v).toLocaleString();
const dur = (a, b) => (a && b) ? (b - a).toFixed(0) + " s" : "—";
const table = (cols, rows) => `<table><tr>${cols.map((c) => `<th>${esc(c)}</th>`).join("")}</tr>${rows.map((r) => `<tr>${r.join("")}</tr>`).join("")}</table>`;
const td = (v, cls) => `<td${cls ? ` class="${cls}"` : ""}>${esc(v)}</td>`;
const stamp = (t) => t ? new Date(t * 1000).toLocaleString() : "—";
let charts = [];
let live = true;

function clear() { charts.forEach((c) => c.destroy()); charts = []; }

// The coordinator's rule (psyche.explorer.observe.progress): steps 1 … total_steps − 1 train,
// drain rounds then move `step` past total_steps without training.
function progressText(r) {
  const p = r.progress;
  const trained = `${num(p.trained_steps)} of ${num(p.steps_to_train)} steps trained`;
  return p.finished ? `finished · ${trained}` : `step ${num(Math.min(r.step, r.total_steps))} · ${trained}`;
}

async function runsView() {
  const runs = await api("runs?limit=200");
  clear();
  main.innerHTML = `<h2>runs</h2>` + (runs.length ? table(
    ["run", "name", "backend / cluster", live ? "phase" : "last phase stored", "progress", "clients", "tokens trained", "last update"],
    runs.map((r) => [
      `<td><a class="run-link" href="#/run/${r.id}">${esc(r.run_id)}</a></td>`, td(r.name), td(r.backend + " / " + r.cluster),
      `<td><span class="phase">${esc(r.phase)}</span></td>`, `<td class="run-progress">${progressText(r)}</td>`, td(r.clients),
      td(num(r.tokens)), td(live ? ago(r.last_update) + " ago" : stamp(r.last_update)),
    ])) : "<p>no run indexed yet</p>");
}

function chart(el, title, label, xs, series) {
  el.dataset.points = String(xs.length);
  el.innerHTML = "";
  if (!xs.length) { el.innerHTML = `<b>${esc(title)}</b><p>no data yet</p>`; return; }
  const colors = ["#2f81f7", "#d1242f", "#1a7f37", "#8250df", "#bf8700"];
  const opts = {
    title, width: Math.max(300, el.clientWidth - 16), height: 220,
    scales: { x: { time: false } }, axes: [{ label: "step", incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000] }, { label }],
    series: [{ label: "step" }, ...series.map((s, i) => ({ label: s.label, stroke: colors[i % colors.length], width: 2, points: { show: true, size: 4 } }))],
  };
  charts.push(new uPlot(opts, [xs, ...series.map((s) => s.data)], el));
}

async function runView(id) {
  const [run, steps, rounds, txs, cks] = await Promise.all([
    api(`runs/${id}`), api(`runs/${id}/steps?limit=1000`), api(`runs/${id}/rounds?limit=50`),
    api(`runs/${id}/transactions?limit=30`), api(`runs/${id}/checkpoints?limit=50`),
  ]);
  clear();
  const d = run.detail || {};
  const pct = 100 * Math.min(1, Math.max(0, run.progress.fraction));
  const clients = d.clients || [];
  const last = steps.length ? steps[steps.length - 1] : null;
  main.innerHTML = `
    <h2>run <span id="run-id">${esc(run.run_id)}</span> <small>${esc(run.name !== run.run_id ? run.name : "")}</small></h2>
    <div class="cards">
      <div class="card">${live ? "phase" : "last phase stored"} <b><span id="phase" class="phase">${esc(run.phase)}</span></b>${live
        ? `for <span id="in-phase" data-since="${run.phase_since}">${ago(run.phase_since)}</span>`
        : `<span id="stored-at">stored ${esc(stamp(run.last_update))}</span>`}</div>
      <div class="card">epoch / round <b>${run.epoch} / ${run.height}</b><span id="progress-text">${progressText(run)}</span></div>
      <div class="card">clients <b>${run.clients}</b>witnesses ${d.witnesses ?? 0} / ${d.witness_target ?? 0}</div>
      <div class="card">tokens/s <b>${last ? num(Math.round(last.tokens_per_sec)) : "—"}</b>mean over witnesses</div>
      <div class="card">tokens trained <b>${num(run.tokens)}</b>${esc(run.backend)} · ${esc(run.cluster)}</div>
    </div>
    <div class="bar" title="${pct.toFixed(1)} %"><div id="progress" style="width:${pct}%"></div></div>
    <div class="charts"><div class="chart" id="loss-chart"></div><div class="chart" id="tps-chart"></div><div class="chart" id="eval-chart"></div></div>
    <h3>clients</h3>${table(["id", "state", "healthy", "points earned", "slashed", "claimed", "connected", "P2P"], clients.map((c) => [
      td(c.id, "id"), td(c.state), `<td class="${c.healthy ? "ok" : "bad"}">${c.healthy ? "yes" : "no"}</td>`, td(num(c.earned)), td(num(c.slashed)), td(num(c.claimed)),
      td(c.connected === undefined ? "—" : (c.connected ? "yes" : "no")), td(c.p2p ?? "unknown")]))}
    <h3>rounds</h3>${table(["epoch", "round", "step", "started", "train", "witness", "witnesses", "end", "trained"], rounds.slice().reverse().map((r) => [
      td(r.epoch), td(r.height), td(r.step), td(when(r.train_at)), td(dur(r.train_at, r.witness_at)), td(dur(r.witness_at, r.end_at)),
      td(`${r.witnesses} / ${r.witness_target}`), td(r.witness_at ? (r.opportunistic ? "opportunistic" : "timeout") : (live ? "in progress" : "not seen to end")),
      td(r.trained === false ? "no (drain)" : "yes")]))}
    ${(d.events || []).length ? `<h3>recent server events and rejections</h3>${table(["time", "event"], d.events.slice().reverse().map((e) => [td(when(e.at)), td(e.text)]))}` : ""}
    <h3>checkpoints</h3>${cks.length ? table(["checkpoint", "epoch", "step", "seen"], cks.map((c) => [td(c.label), td(c.epoch), td(c.step), td(when(c.at))])) : "<p>none</p>"}
    <h3>recent transactions</h3>${txs.length ? table(["signature", "slot", "instruction", "signer", "result"], txs.map((t) => [
      td(t.signature, "id"), td(t.slot), td(t.instruction), td(t.signer, "id"), `<td class="${t.ok ? "ok" : "bad"}">${t.ok ? "ok" : "rejected: " + esc(t.error)}</td>`])) : "<p>none (a centralized run has no transactions)</p>"}`;
  const xs = steps.map((s) => s.step);
  chart(document.getElementById("loss-chart"), "training loss", "loss", xs, [{ label: "loss", data: steps.map((s) => s.loss) }]);
  chart(document.getElementById("tps-chart"), "tokens/s", "tokens/s", xs, [{ label: "tokens/s", data: steps.map((s) => s.tokens_per_sec) }]);
  const tasks = [...new Set(steps.flatMap((s) => Object.keys(s.evals || {})))];
  const evalSteps = steps.filter((s) => Object.keys(s.evals || {}).length);
  chart(document.getElementById("eval-chart"), "evals (accuracy)", "accuracy", evalSteps.map((s) => s.step),
    tasks.map((t) => ({ label: "task " + t, data: evalSteps.map((s) => s.evals[t] ?? null) })));
}

async function poolsView() {
  const [pools, trs] = await Promise.all([api("pools"), api("treasurers")]);
  clear();
  main.innerHTML = `<h2>Mining Pools</h2>` + (pools.length ? pools.map((p) => {
    const v = p.data;
    return `<h3 class="pool" data-index="${v.index}">pool ${v.index} <small class="id">${esc(p.address)}</small></h3>
      <div class="cards">
        <div class="card">cap <b class="pool-cap">${num(v.cap)}</b></div>
        <div class="card">deposited <b class="pool-deposited">${num(v.deposited)}</b></div>
        <div class="card">extracted <b class="pool-extracted">${num(v.extracted)}</b></div>
        <div class="card">redeemable <b class="pool-redeemable">${num(v.redeemable)}</b>claimed ${num(v.claimed)}</div>
        <div class="card">frozen <b class="pool-frozen">${v.frozen ? "yes" : "no"}</b></div>
      </div>
      ${table(["lender", "deposited", "share", "entitled", "claimed", "claimable"], v.lenders.map((l) => [
        td(l.user, "id"), td(num(l.deposited)), td((100 * l.share).toFixed(2) + " %"), td(num(l.entitled)), `<td class="lender-claimed">${num(l.claimed)}</td>`, td(num(l.claimable))]))}`;
  }).join("") : "<p>no pool followed (give --pool INDEX)</p>") +
  `<h2>Treasurer runs</h2>` + (trs.length ? table(["account", "coordinator", "collateral per point", "claimed points", "claimed collateral"], trs.map((t) => [
    td(t.address, "id"), td(t.data.coordinator_account, "id"), td(num(t.data.collateral_per_point)), `<td class="tr-claimed-points">${num(t.data.total_claimed_points)}</td>`, td(num(t.data.total_claimed_collateral))])) : "<p>none</p>");
}

async function render() {
  const h = location.hash || "#/";
  try {
    const m = h.match(/^#\/run\/(\d+)$/);
    if (m) await runView(m[1]); else if (h === "#/pools") await poolsView(); else await runsView();
    error.textContent = "";
  } catch (e) {
    // Keep what is shown (the explorer may be restarting); say why it is not updating, and try
    // again: a stored history sends no change events that would.
    error.textContent = e.message;
    if (main.textContent === "loading…") main.innerHTML = "";
    setTimeout(refresh, 2000);
  }
}

// One render at a time; a request that arrives during one (a click on a run while the list is
// still rendering, a change event) renders again after it instead of being dropped.
let pending = false, again = false;
async function refresh() {
  if (pending) { again = true; return; }
  pending = true;
  try { do { again = false; await render(); } while (again); } finally { pending = false; }
}
window.addEventListener("hashchange", refresh);
setInterval(() => { const el = document.getElementById("in-phase"); if (el) el.textContent = ago(Number(el.dataset.since)); }, 1000);
// Live: re-render whenever the indexer stores something. History: nothing will change, so no
// event stream, no live dot, and the banner says so.
async function start() {
  try { live = (await api("explorer")).live !== false; } catch (e) { live = true; }
  if (!live) {
    document.getElementById("history").hidden = false;
    document.getElementById("live").hidden = true;
    document.title = "psyche run explorer (history)";
    return refresh();
  }
  const dot = document.getElementById("live");
  const events = new EventSource("/api/events");
  events.addEventListener("change", () => { dot.classList.add("on"); refresh(); });
  events.onerror = () => dot.classList.remove("on");
  return refresh();
}
start();
