/* prbench viewer: plain JS over window.PRBENCH_VIEW (data.js, written by prbench.viewer.data).
   Every statistic shown (CIs, compare's difference and p-value, meta's agreement) was computed in Python;
   the page only counts credits for the per-person and per-category views. Each view is a URL fragment. */
"use strict";
(function () {
  const D = window.PRBENCH_VIEW;
  const main = document.getElementById("main");
  if (!D) { main.textContent = "data.js is missing or damaged: rebuild with prbench view --bundle"; return; }
  const RUNS = D.runs, DS = D.datasets;
  const CREDIT = { "1": 1, "h": 0.5, "0": 0 };
  const MARK = { "1": "✓", "h": "½", "0": "✗", "-": "–" };

  // ---- small helpers
  function h(tag, attrs, ...kids) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "on") for (const [ev, fn] of Object.entries(v)) el.addEventListener(ev, fn);
      else if (k === "class") el.className = v;
      else el.setAttribute(k, v);
    }
    for (const kid of kids.flat()) if (kid !== null && kid !== undefined && kid !== false)
      el.append(kid instanceof Node ? kid : String(kid));
    return el;
  }
  const pct = (x) => (x === null || x === undefined ? "–" : (100 * x).toFixed(1));
  const ci = (lo, hi) => (lo === null || lo === undefined || hi === null || hi === undefined ? "–" : `[${pct(lo)}, ${pct(hi)}]`);
  const signed = (x) => (x === null || x === undefined ? "–" : (x >= 0 ? "+" : "") + (100 * x).toFixed(1));
  const enc = encodeURIComponent;
  function route() {
    const raw = location.hash.replace(/^#\/?/, "");
    const [path, query] = raw.split("?");
    const parts = path.split("/").map(decodeURIComponent);
    const q = {};
    for (const kv of (query || "").split("&")) if (kv) { const [k, v] = kv.split("="); q[decodeURIComponent(k)] = decodeURIComponent(v || ""); }
    return { view: parts[0] || "board", args: parts.slice(1), q };
  }
  function link(view, args, q) {
    const qs = Object.entries(q || {}).filter(([, v]) => v !== "" && v !== undefined && v !== null).map(([k, v]) => `${enc(k)}=${enc(v)}`).join("&");
    return "#/" + [view, ...(args || []).map(enc)].join("/") + (qs ? "?" + qs : "");
  }
  function go(view, args, q) { location.hash = link(view, args, q); }
  function select(label, value, options, onchange) {
    const s = h("select", { "aria-label": label, on: { change: (e) => onchange(e.target.value) } },
      options.map(([v, text]) => h("option", { value: v, selected: v === value ? "selected" : null }, text)));
    return h("label", { class: "control" }, label + " ", s);
  }
  function sortable(head, rows, sortKey, dir, onSort) {
    // head: [{key, text, num}], rows: [{cells: [...], keys: {key: value}}]
    const sorted = rows.slice();
    if (sortKey) {
      const sign = dir === "asc" ? 1 : -1;
      sorted.sort((a, b) => {
        const x = a.keys[sortKey], y = b.keys[sortKey];
        if (x === y) return 0;
        if (x === null || x === undefined || Number.isNaN(x)) return 1;
        if (y === null || y === undefined || Number.isNaN(y)) return -1;
        return (x < y ? -1 : 1) * sign;
      });
    }
    const th = head.map((c) => h("th", { class: c.num ? "num" : null, scope: "col" },
      h("button", { class: "sort", type: "button", "data-key": c.key,
        on: { click: () => onSort(c.key, sortKey === c.key && dir === "desc" ? "asc" : "desc") } },
        c.text, sortKey === c.key ? (dir === "asc" ? " ▲" : " ▼") : "")));
    return h("div", { class: "scroll" }, h("table", {}, h("thead", {}, h("tr", {}, th)),
      h("tbody", {}, sorted.map((r) => h("tr", r.attrs || {}, r.cells.map((c, i) => h("td", { class: head[i].num ? "num" : null }, c)))))));
  }
  const datasets = () => Object.keys(DS);
  const runsOf = (data) => RUNS.filter((r) => r.data === data);
  function conditions(data) {
    const order = ["none", "profile", "planner", "oracle", "wrong-profile", "history", "persona", "wrong-history", "wrong-persona"];
    const have = [...new Set(runsOf(data).map((r) => r.cond))];
    return have.sort((a, b) => ((order.indexOf(a) + 1 || 99) - (order.indexOf(b) + 1 || 99)) || a.localeCompare(b));
  }
  // An RM is a model with its options and the run settings that change a number; labelled by what differs.
  const identity = (r) => JSON.stringify([r.model, r.options, r.settings]);
  function labeller(data) {
    const rs = runsOf(data);
    const keys = new Set();
    for (const r of rs) { for (const k of Object.keys(r.options)) keys.add("o:" + k); for (const k of Object.keys(r.settings)) keys.add("s:" + k); }
    const differ = [...keys].filter((k) => new Set(rs.map((r) => JSON.stringify(k[0] === "o" ? r.options[k.slice(2)] : r.settings[k.slice(2)]))).size > 1);
    return (r) => {
      const extra = differ.map((k) => `${k.slice(2)}=${JSON.stringify(k[0] === "o" ? r.options[k.slice(2)] : r.settings[k.slice(2)]) ?? "default"}`);
      return extra.length ? `${r.model} (${extra.join(", ")})` : r.model;
    };
  }
  function rms(data, cond) {  // one column per RM identity with a run under cond
    const label = labeller(data);
    const out = new Map();
    for (const r of runsOf(data)) if (!cond || r.cond === cond) if (!out.has(identity(r))) out.set(identity(r), { id: identity(r), label: label(r), runs: {} });
    for (const r of runsOf(data)) if (out.has(identity(r))) out.get(identity(r)).runs[r.cond] = r;
    return [...out.values()];
  }
  function accOver(run, idx) {  // mean credit over pair indices (ties 0.5), n valid
    let s = 0, n = 0;
    for (const i of idx) { const c = run.credit[i]; if (c !== "-") { s += CREDIT[c]; n++; } }
    return { acc: n ? s / n : null, n };
  }

  // ---- views
  function board(q) {
    const data = q.data || "", cat = q.cat || "";
    const dsNames = datasets();
    const cats = [...new Set(dsNames.filter((d) => !data || d === data).flatMap((d) => DS[d].cats))];
    const wrap = [h("h1", {}, "Leaderboard"),
      h("p", { class: "hint" }, "Every eval run: model × condition. Accuracy on pairs (ties 0.5) with its bootstrap 95% CI; a category's accuracy is counted from the run's credits (no CI)."),
      h("div", { class: "controls" },
        select("data set", data, [["", "all"], ...dsNames.map((d) => [d, d])], (v) => go("board", [], { ...q, data: v, cat: "" })),
        select("category", cat, [["", "all"], ...cats.map((c) => [c, c])], (v) => go("board", [], { ...q, cat: v })))];
    const rows = [];
    const anyCost = RUNS.some((r) => r.cost), anyStop = RUNS.some((r) => r.stop);
    const oneSet = data !== "" || dsNames.length === 1;  // the data set column only where rows differ in it
    for (const d of dsNames) {
      if (data && d !== data) continue;
      const label = labeller(d), ds = DS[d];
      const diffSet = Object.keys((runsOf(d)[0] || { settings: {} }).settings).filter((k) => new Set(runsOf(d).map((r) => JSON.stringify(r.settings[k]))).size > 1);
      for (const r of runsOf(d)) {
        let acc = r.acc, lo = r.lo, hi = r.hi, n = r.n;
        if (cat) {
          const ci_ = ds.cats.indexOf(cat);
          if (ci_ < 0) continue;
          const idx = []; ds.cat.forEach((c, i) => { if (c === ci_) idx.push(i); });
          const a = accOver(r, idx); acc = a.acc; n = a.n; lo = hi = null;
          if (!n) continue;
        }
        const cells = [h("a", { href: link("people", [], { data: d, cond: r.cond }) }, label(r)), r.cond, pct(acc), ci(lo, hi),
          `${n}${r.n_invalid ? ` (${r.n_invalid} invalid)` : ""}`, ...(oneSet ? [] : [d]), diffSet.map((k) => `${k}=${JSON.stringify(r.settings[k])}`).join(", ") || "–",
          r.gain ? `${signed(r.gain.diff)} ${ci(r.gain.lo, r.gain.hi)} vs ${r.gain.control}` : "–"];
        if (anyCost) cells.push(r.cost ? `${r.cost.usd === null ? "?" : "$" + r.cost.usd.toFixed(2)} · ${r.cost.in}+${r.cost.out} tok` : "–");
        if (anyStop) cells.push(r.stop ? `${r.stop.rule}: ${r.stop.used}/${r.stop.of}, ${r.stop.why}` : "–");
        rows.push({ cells, attrs: { "data-run": r.path }, keys: { model: label(r), cond: r.cond, data: d, acc, ci: hi === null ? null : hi - lo, n, settings: diffSet.map((k) => JSON.stringify(r.settings[k])).join(), gain: r.gain ? r.gain.diff : null, cost: r.cost ? r.cost.usd : null, stop: r.stop ? r.stop.used : null } });
      }
    }
    const head = [{ key: "model", text: "model" }, { key: "cond", text: "condition" },
      { key: "acc", text: "accuracy %", num: true }, { key: "ci", text: "95% CI", num: true }, { key: "n", text: "n", num: true },
      ...(oneSet ? [] : [{ key: "data", text: "data set" }]), { key: "settings", text: "settings that differ" }, { key: "gain", text: "gain vs control", num: true }];
    if (anyCost) head.push({ key: "cost", text: "cost · tokens", num: true });
    if (anyStop) head.push({ key: "stop", text: "stopping rule: used/of", num: false });
    wrap.push(rows.length ? sortable(head, rows, q.sort || "acc", q.dir || "desc", (k, dir) => go("board", [], { ...q, sort: k, dir }))
      : h("p", { class: "empty" }, RUNS.length ? "No run matches these filters." : "No eval run was found under the given folders."));
    return wrap;
  }

  function seenSets(data) {  // person -> seen by a trained RM here; null where no RM names training people
    const seen = DS[data].seen || {};
    const specs = Object.keys(seen);
    if (!specs.length) return null;
    const set = new Set(); for (const s of specs) for (const u of seen[s]) set.add(u);
    return set;
  }

  function people(q) {
    const dsNames = datasets();
    if (!dsNames.length) return [h("h1", {}, "People"), h("p", { class: "empty" }, "No eval run was found.")];
    const data = DS[q.data] ? q.data : dsNames[0], ds = DS[data];
    const conds = conditions(data);
    const cond = conds.includes(q.cond) ? q.cond : (conds.includes("profile") ? "profile" : conds[0]);
    const cat = q.cat || "", seenF = q.seen || "";
    const gapOk = conds.includes("profile") && conds.includes("wrong-profile");
    const cols = rms(data, cond);
    const seen = seenSets(data);
    const byUser = ds.users.map(() => []);
    ds.user.forEach((u, i) => { if (!cat || ds.cats[ds.cat[i]] === cat) byUser[u].push(i); });
    const rows = [];
    ds.users.forEach((uid, u) => {
      const idx = byUser[u];
      if (!idx.length) return;
      if (seen && seenF && (seenF === "seen") !== seen.has(uid)) return;
      const keys = { person: uid, size: ds.size ? ds.size[uid] ?? null : null, n: idx.length };
      const cells = [h("a", { href: link("person", [data, uid], { cond }), class: "person" }, uid),
        seen ? (seen.has(uid) ? "seen" : "unseen") : null, keys.size ?? "–", idx.length].filter((c) => c !== null);
      const gaps = [];
      cols.forEach((col, j) => {
        const r = col.runs[cond];
        const a = accOver(r, idx);
        keys["rm" + j] = a.acc;
        cells.push(h("span", {}, pct(a.acc), h("small", {}, ` n=${a.n}`)));
        if (gapOk && col.runs["profile"] && col.runs["wrong-profile"]) {
          const p = accOver(col.runs["profile"], idx).acc, w = accOver(col.runs["wrong-profile"], idx).acc;
          if (p !== null && w !== null) gaps.push(p - w);
        }
      });
      if (gapOk) { keys.gap = gaps.length ? gaps.reduce((x, y) => x + y, 0) / gaps.length : null; cells.push(signed(keys.gap)); }
      rows.push({ cells, keys });
    });
    const head = [{ key: "person", text: "person" }, ...(seen ? [{ key: "seenk", text: "training" }] : []),
      { key: "size", text: "profile size", num: true }, { key: "n", text: "pairs", num: true },
      ...cols.map((c, j) => ({ key: "rm" + j, text: c.label, num: true }))];
    if (gapOk) head.push({ key: "gap", text: "profile − wrong-profile (mean over RMs)", num: true });
    if (seen) rows.forEach((r) => { r.keys.seenk = seen.has(r.keys.person) ? 1 : 0; });
    return [h("h1", {}, "People"),
      h("p", { class: "hint" }, `Accuracy per person (% of their pairs, ties 0.5) under ${cond}, with n; click a person for their pairs.`),
      h("div", { class: "controls" },
        select("data set", data, dsNames.map((d) => [d, d]), (v) => go("people", [], { data: v })),
        select("condition", cond, conds.map((c) => [c, c]), (v) => go("people", [], { ...q, data, cond: v })),
        select("category", cat, [["", "all"], ...ds.cats.map((c) => [c, c])], (v) => go("people", [], { ...q, data, cat: v })),
        seen ? select("person", seenF, [["", "all"], ["seen", "seen in training"], ["unseen", "unseen"]], (v) => go("people", [], { ...q, data, seen: v }))
          : h("span", { class: "hint" }, "seen/unseen: no RM here names its training people")),
      rows.length ? sortable(head, rows, q.sort || "person", q.dir || "asc", (k, dir) => go("people", [], { ...q, data, cond, sort: k, dir }))
        : h("p", { class: "empty" }, "No person matches these filters.")];
  }

  function person(args, q) {
    const [data, uid] = args, ds = DS[data];
    if (!ds || ds.users.indexOf(uid) < 0) return [h("p", { class: "empty" }, `No person ${uid} in ${data}.`)];
    const u = ds.users.indexOf(uid);
    const conds = conditions(data);
    const cond = conds.includes(q.cond) ? q.cond : conds[0];
    const cols = rms(data, cond);
    const rows = [];
    ds.user.forEach((x, i) => {
      if (x !== u) return;
      const p = ds.pairs ? ds.pairs[i] : null;
      const keys = { id: ds.ids[i], cat: ds.cats[ds.cat[i]], q: p ? p.q : null };
      const cells = [h("a", { href: link("pair", [data, ds.ids[i]]), class: "pair" }, ds.ids[i]), keys.cat, p ? p.q : "–"];
      cols.forEach((c, j) => { const ch = c.runs[cond].credit[i]; keys["rm" + j] = ch === "-" ? null : CREDIT[ch]; cells.push(MARK[ch]); });
      rows.push({ cells, keys });
    });
    const head = [{ key: "id", text: "pair" }, { key: "cat", text: "category" }, { key: "q", text: "question" },
      ...cols.map((c, j) => ({ key: "rm" + j, text: c.label, num: true }))];
    return [h("p", { class: "crumbs" }, h("a", { href: link("people", [], { data, cond }) }, "People"), " › ", uid),
      h("h1", {}, `Person ${uid}`),
      h("p", { class: "hint" }, `${rows.length} pairs; ✓ the RM preferred the chosen answer, ✗ the rejected one, ½ a tie, – not validly scored (under ${cond}).`),
      h("div", { class: "controls" }, select("condition", cond, conds.map((c) => [c, c]), (v) => go("person", [data, uid], { ...q, cond: v }))),
      sortable(head, rows, q.sort || "id", q.dir || "asc", (k, dir) => go("person", [data, uid], { ...q, sort: k, dir }))];
  }

  function profileList(ds, shown, title) {
    if (!shown) return h("p", { class: "empty" }, "not recorded");
    const [owner, idx] = shown;
    const items = (ds.profiles || {})[owner] || [];
    const one = (it) => {
      let body;
      if (it.p) body = [h("span", { class: "verdict chose" }, "chose"), " ", it.t, h("span", { class: "over" }, " over "), it.r || "–", h("div", { class: "asked" }, "asked: ", it.p)];
      else if (it.s) body = [h("span", { class: "verdict " + (/^dis|^down|^rej/.test(it.s) ? "against" : "for") }, it.s), " ", it.t];
      else body = [it.t];
      return h("li", { class: it.s ? "stance" : "post" }, it.c ? h("span", { class: "tag" }, it.c) : null, " ", ...body);
    };
    const hidden = items.map((_, i) => i).filter((i) => !idx.includes(i));
    return h("div", { class: "profile" }, h("h3", {}, title, h("small", {}, ` ${owner}: ${idx.length} of ${items.length} items shown`)),
      h("ol", {}, idx.map((i) => one(items[i]))),
      hidden.length ? h("details", {}, h("summary", {}, `${hidden.length} items the RMs did not see`), h("ul", {}, hidden.map((i) => one(items[i])))) : null);
  }

  function pair(args) {
    const [data, id] = args, ds = DS[data];
    const i = ds ? ds.ids.indexOf(id) : -1;
    if (i < 0) return [h("p", { class: "empty" }, `No pair ${id} in ${data}.`)];
    const p = ds.pairs ? ds.pairs[i] : null, uid = ds.users[ds.user[i]];
    const out = [h("p", { class: "crumbs" }, h("a", { href: link("people", [], { data }) }, "People"), " › ",
      h("a", { href: link("person", [data, uid]) }, uid), " › ", id), h("h1", {}, `Pair ${id}`)];
    if (!p) out.push(h("p", { class: "note" }, ds.note || "this pair's texts are not in the data set"));
    else {
      out.push(h("section", { class: "question" }, h("h2", {}, "Question"), h("p", {}, p.q)),
        h("section", { class: "answers" }, h("div", { class: "answer chosen" }, h("h3", {}, "Chosen (the user's choice)"), h("p", {}, p.c)),
          h("div", { class: "answer rejected" }, h("h3", {}, "Rejected"), h("p", {}, p.r))),
        h("section", {}, h("h2", {}, "Profile as the RM saw it"), h("p", { class: "hint" }, `under profile, ${ds.shown_as}, most relevant first`),
          ds.shown_note ? h("p", { class: "note" }, ds.shown_note) : null,
          p.px ? h("p", { class: "note" }, p.px) : profileList(ds, p.p, "profile")));
    }
    const conds = conditions(data);
    const cols = rms(data, null);
    const rows = cols.map((c) => h("tr", {}, h("th", { scope: "row" }, c.label), conds.map((cond) => {
      const r = c.runs[cond];
      if (!r) return h("td", {}, "–");
      const ch = r.credit[i], bits = [h("strong", {}, MARK[ch])];
      if (r.sc && r.sc[i] !== null) bits.push(` ${r.sc[i]} vs ${r.sr[i]}`, h("small", {}, ` margin ${(r.sc[i] - r.sr[i]).toPrecision(3)}`));
      const j = r.judge && r.judge[i];
      if (j) {
        if (j.v) bits.push(` verdicts ${j.v.map((v) => v ?? "none").join("/")} (chosen at ${j.pos})`);
        if (j.invalid) bits.push(h("small", { class: "bad" }, ` invalid: ${j.invalid}`));
        const raw = ["raw", "rationale", "explanation", "reasoning", "output"].filter((k) => j[k]);
        if (raw.length) bits.push(h("details", {}, h("summary", {}, "judge's words"), raw.map((k) => h("pre", {}, `${k}: ${j[k]}`))));
      }
      return h("td", {}, bits);
    })));
    out.push(h("section", {}, h("h2", {}, "Every RM under every condition"),
      h("p", { class: "hint" }, "✓ chosen preferred, ✗ rejected preferred, ½ tie; score of chosen vs rejected and margin where the RM scores each answer."),
      h("div", { class: "scroll" }, h("table", { class: "scores" }, h("thead", {}, h("tr", {}, h("th", {}, "RM"), conds.map((c) => h("th", {}, c)))), h("tbody", {}, rows)))));
    if (p) out.push(h("section", {}, h("h2", {}, "The wrong-profile control"),
      h("p", { class: "hint" }, "Another person's profile, drawn from (seed, pair id): an RM that reads the person should do worse with it."),
      p.wx ? h("p", { class: "note" }, p.wx) : profileList(ds, p.w, "wrong profile")));
    return out;
  }

  function compare(q) {
    const evals = RUNS;
    if (evals.length < 2) return [h("h1", {}, "Compare two RMs"), h("p", { class: "empty" }, "Needs two eval runs.")];
    const a = evals.find((r) => String(r.i) === q.a) || evals[0];
    const partners = evals.filter((r) => r !== a && r.data === a.data && r.cond === a.cond);
    const b = partners.find((r) => String(r.i) === q.b) || partners[0];
    const label = labeller(a.data);
    const name = (r) => `${label(r)} [${r.cond}] · ${r.data}`;
    const out = [h("h1", {}, "Compare two RMs"),
      h("p", { class: "hint" }, "A − B on the pairs both scored validly: paired bootstrap 95% CI and exact McNemar p-value, computed by prbench compare's own function when the bundle was written."),
      h("div", { class: "controls" },
        select("A", String(a.i), evals.map((r) => [String(r.i), name(r)]), (v) => go("compare", [], { a: v })),
        partners.length ? select("B", String(b.i), partners.map((r) => [String(r.i), name(r)]), (v) => go("compare", [], { a: a.i, b: v }))
          : h("span", { class: "hint" }, "no other run of this data set and condition"))];
    if (!b) return out;
    const key = a.i < b.i ? `${a.i}-${b.i}` : `${b.i}-${a.i}`, res = D.compare[key];
    if (!res) { out.push(h("p", { class: "empty" }, "The two runs share no validly scored pair.")); return out; }
    const flip = a.i > b.i;  // stored as the earlier run minus the later one
    const diff = flip ? -res.diff : res.diff, lo = flip ? -res.ci_high : res.ci_low, hi = flip ? -res.ci_low : res.ci_high;
    out.push(h("dl", { class: "result", id: "compare-result" },
      h("dt", {}, "difference A − B (points)"), h("dd", { "data-value": diff }, signed(diff)),
      h("dt", {}, "95% CI"), h("dd", { "data-lo": lo, "data-hi": hi }, ci(lo, hi)),
      h("dt", {}, "McNemar p"), h("dd", { "data-value": res.mcnemar_p }, res.mcnemar_p.toPrecision(3)),
      h("dt", {}, "pairs both scored"), h("dd", {}, String(res.n_shared)),
      h("dt", {}, "only A right / only B right"), h("dd", {}, `${flip ? res.n_b_only : res.n_a_only} / ${flip ? res.n_a_only : res.n_b_only}`)));
    if (flip) out.push(h("p", { class: "hint" }, "(shown as −(B − A): prbench compare B A gives this result; its CI ends swap sides)"));
    const ds = DS[a.data], per = new Map(), dis = [];
    for (let i = 0; i < ds.ids.length; i++) {
      const x = a.credit[i], y = b.credit[i];
      if (x === "-" || y === "-") continue;
      const u = ds.users[ds.user[i]];
      if (!per.has(u)) per.set(u, { w: 0, l: 0, t: 0 });
      const d = CREDIT[x] - CREDIT[y], e = per.get(u);
      if (d > 0) e.w++; else if (d < 0) e.l++; else e.t++;
      if (d !== 0) dis.push([i, x, y]);
    }
    const rows = [...per.entries()].map(([u, e]) => ({ cells: [h("a", { href: link("person", [a.data, u], { cond: a.cond }) }, u), e.w, e.l, e.t], keys: { person: u, w: e.w, l: e.l, t: e.t, net: e.w - e.l } }));
    out.push(h("h2", {}, "Per person: pairs A wins, loses, draws"),
      sortable([{ key: "person", text: "person" }, { key: "w", text: "A wins", num: true }, { key: "l", text: "A loses", num: true }, { key: "t", text: "same", num: true }],
        rows, q.sort || "person", q.dir || "asc", (k, dir) => go("compare", [], { ...q, a: a.i, b: b.i, sort: k, dir })),
      h("h2", {}, `Pairs where they disagree (${dis.length})`),
      h("ul", { class: "disagree" }, dis.slice(0, 500).map(([i, x, y]) => h("li", {}, h("a", { href: link("pair", [a.data, ds.ids[i]]), class: "pair" }, ds.ids[i]), ` A ${MARK[x]} B ${MARK[y]}`))),
      dis.length > 500 ? h("p", { class: "hint" }, `first 500 of ${dis.length}`) : null);
    return out;
  }

  function curve(runs) {  // Best-of-N: expected score over k with its CI band, one line per RM (inline SVG)
    const W = 560, H = 240, P = 40;
    const ks = runs.flatMap((r) => r.k), ys = runs.flatMap((r) => [...r.expected, ...r.lo, ...r.hi]).filter((v) => v !== null);
    const kx = [Math.min(...ks), Math.max(...ks)], yr = [Math.min(...ys), Math.max(...ys)];
    const X = (k) => P + (W - 2 * P) * (kx[1] === kx[0] ? 0.5 : (Math.log(k) - Math.log(kx[0])) / (Math.log(kx[1]) - Math.log(kx[0])));
    const Y = (v) => H - P - (H - 2 * P) * (yr[1] === yr[0] ? 0.5 : (v - yr[0]) / (yr[1] - yr[0]));
    const NS = "http://www.w3.org/2000/svg";
    const svg = document.createElementNS(NS, "svg");
    svg.setAttribute("viewBox", `0 0 ${W} ${H}`); svg.setAttribute("class", "chart"); svg.setAttribute("role", "img");
    const add = (tag, at, text) => { const e = document.createElementNS(NS, tag); for (const [k, v] of Object.entries(at)) e.setAttribute(k, v); if (text) e.textContent = text; svg.append(e); return e; };
    add("line", { x1: P, y1: H - P, x2: W - P, y2: H - P, class: "axis" });
    add("line", { x1: P, y1: P, x2: P, y2: H - P, class: "axis" });
    for (const k of [...new Set(ks)]) add("text", { x: X(k), y: H - P + 16, class: "tick", "text-anchor": "middle" }, String(k));
    add("text", { x: P - 4, y: Y(yr[1]) + 4, class: "tick", "text-anchor": "end" }, yr[1].toFixed(2));
    add("text", { x: P - 4, y: Y(yr[0]) + 4, class: "tick", "text-anchor": "end" }, yr[0].toFixed(2));
    runs.forEach((r, j) => {
      const band = r.k.map((k, t) => [k, r.lo[t], r.hi[t]]).filter(([, lo, hi]) => lo !== null && hi !== null);
      if (band.length) add("path", { d: "M" + band.map(([k, lo]) => `${X(k)},${Y(lo)}`).join("L") + "L" + band.reverse().map(([k, , hi]) => `${X(k)},${Y(hi)}`).join("L") + "Z", class: `band c${j % 6}` });
      add("path", { d: "M" + r.k.map((k, t) => `${X(k)},${Y(r.expected[t])}`).join("L"), class: `line c${j % 6}` });
    });
    return h("figure", {}, svg, h("figcaption", {}, runs.map((r, j) => h("span", { class: `key c${j % 6}` }, `■ ${r.rm}`))));
  }

  function downstream() {
    const O = D.others || [];
    const out = [h("h1", {}, "Downstream")];
    if (!O.length && !(D.meta && D.meta.rows)) { out.push(h("p", { class: "empty" }, "No Best-of-N, RL, decoding or meta run was found.")); return out; }
    const bon = O.filter((r) => r.kind === "bon" && r.k);
    const groups = new Map();
    for (const r of bon) { const g = `${r.cond ?? "-"} · ${r.grader}`; if (!groups.has(g)) groups.set(g, []); groups.get(g).push(r); }
    if (groups.size) out.push(h("h2", {}, "Best-of-N curves"), h("p", { class: "hint" }, "Expected grade of the RM's pick from k samples, 95% CI band."));
    for (const [g, rs] of groups) out.push(h("h3", {}, g), curve(rs));
    const rest = O.filter((r) => !(r.kind === "bon" && r.k));
    if (rest.length) {
      out.push(h("h2", {}, "RL, decoding and other runs"));
      const rows = rest.map((r) => {
        const last = r.expected ? r.expected.length - 1 : -1;
        const value = last >= 0 ? `${r.expected[last].toFixed(3)} ${r.lo[last] === null ? "" : `[${r.lo[last].toFixed(3)}, ${r.hi[last].toFixed(3)}]`}` : "–";
        const summ = Object.entries(r.summary || {}).filter(([k]) => !["policy", "rm", "condition", "data"].includes(k)).map(([k, v]) => `${k}=${typeof v === "number" ? +v.toPrecision(4) : v}`).join(", ");
        return { cells: [r.title, r.label, r.rm || "–", value, summ || "–"], keys: { kind: r.title, label: r.label, rm: r.rm, v: last >= 0 ? r.expected[last] : null } };
      });
      out.push(sortable([{ key: "kind", text: "kind" }, { key: "label", text: "setting" }, { key: "rm", text: "RM" }, { key: "v", text: "value [95% CI]", num: true }, { key: "s", text: "summary" }], rows, null, null, () => {}));
    }
    const M = D.meta || {};
    if (M.note) out.push(h("p", { class: "note" }, M.note));
    if (M.rows && M.rows.length) {
      out.push(h("h2", {}, "Meta-evaluation: does the benchmark rank RMs as downstream use does?"),
        h("div", { class: "scroll" }, h("table", {}, h("thead", {}, h("tr", {}, ["benchmark", "setting", "RMs", ...M.columns].map((c) => h("th", {}, c)))),
          h("tbody", {}, M.rows.map((r) => h("tr", {}, h("td", {}, r.benchmark), h("td", {}, r.setting), h("td", { class: "num" }, r.n_rms),
            M.columns.map((c) => { const m = r.metrics[c]; return h("td", { class: "num" }, !m || m.value === null ? (r.note || "–") : `${m.value.toFixed(3)} ${m.ci_low === null ? "" : `[${m.ci_low.toFixed(3)}, ${m.ci_high.toFixed(3)}]`}`); })))))));
    }
    return out;
  }

  function render() {
    const { view, args, q } = route();
    const views = { board: () => board(q), people: () => people(q), person: () => person(args, q), pair: () => pair(args),
      compare: () => compare(q), downstream: () => downstream() };
    const fn = views[view] || views.board;
    main.replaceChildren(...fn());
    for (const a of document.querySelectorAll("#nav a")) a.classList.toggle("on", a.dataset.view === view || (view === "person" && a.dataset.view === "people"));
    document.body.dataset.view = views[view] ? view : "board";
    performance.mark("prbench:" + document.body.dataset.view);  // the benchmark's "interactive" moment
  }
  const sk = document.getElementById("skipped");
  if (D.skipped.length || D.notes.length)
    sk.append(h("div", { class: "skipped" }, D.skipped.map((s) => h("p", {}, s)), D.notes.map((s) => h("p", { class: "hint" }, s))));
  window.addEventListener("hashchange", render);
  render();
})();
