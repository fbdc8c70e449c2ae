// haki-context dashboard: a client of the public GraphQL API and nothing else.
//
// Every view reads what any dashboard may read with an API key (or none, in development
// mode): the queries below are the reference for dashboard authors (docs/dashboards.md).
// No framework: views render HTML strings once per change, escaped through esc().
"use strict";

(() => {
  const KEY_STORE = "haki-dashboard-key";
  const POLL_MS = 1000; // the fallback when the subscription is unavailable
  const RESUBSCRIBE_MS = 15000; // how long polling lasts before the websocket is tried again
  const PAGE = 50; // traces per page (the API allows 1..100)
  // A busy project's live list: the table lists the newest rows that match, and the page keeps
  // a bounded number of calls, so an open tab neither slows down nor grows without end.
  const LISTED_MAX = 500;
  const KEPT_MAX = 5000;
  const PAINT_MS = 100; // calls arriving together are painted once
  const HORIZON_DAYS = { VOLATILE: 60, EPHEMERAL: 7 }; // the server's default horizons

  // ---------------------------------------------------------------- helpers

  const $ = (selector, root = document) => root.querySelector(selector);
  const $$ = (selector, root = document) => Array.from(root.querySelectorAll(selector));

  function esc(value) {
    return String(value ?? "")
      .replace(/&/g, "&amp;")
      .replace(/</g, "&lt;")
      .replace(/>/g, "&gt;")
      .replace(/"/g, "&quot;")
      .replace(/'/g, "&#39;");
  }

  const enc = encodeURIComponent;

  function num(value, digits = 3) {
    return value === null || value === undefined ? "" : Number(value).toFixed(digits);
  }

  function ms(value) {
    if (value === null || value === undefined) return "";
    return value >= 100 ? `${Math.round(value)} ms` : `${Number(value).toFixed(1)} ms`;
  }

  function pct(value) {
    return value === null || value === undefined ? "" : `${(value * 100).toFixed(1)} %`;
  }

  // Instants are shown in the browser's time zone, to the second.
  function when(iso) {
    if (!iso) return "";
    const d = new Date(iso);
    const two = (n) => String(n).padStart(2, "0");
    return `${d.getFullYear()}-${two(d.getMonth() + 1)}-${two(d.getDate())} ${d.toTimeString().slice(0, 8)}`;
  }

  function age(seconds) {
    if (seconds < 90) return `${Math.round(seconds)} s`;
    if (seconds < 5400) return `${Math.round(seconds / 60)} min`;
    if (seconds < 172800) return `${(seconds / 3600).toFixed(1)} h`;
    return `${(seconds / 86400).toFixed(1)} days`;
  }

  function clock(iso) {
    return iso ? new Date(iso).toTimeString().slice(0, 8) : "";
  }

  function day(iso) {
    return iso ? String(iso).slice(0, 10) : "";
  }

  function json(value) {
    return typeof value === "string" ? value : JSON.stringify(value);
  }

  // The text a fact is served as (core/texts.py fact_text): "predicate with spaces: value".
  function valueText(value) {
    if (typeof value === "string") return value;
    const parts = [];
    const walk = (v, key) => {
      if (v && typeof v === "object" && !Array.isArray(v)) {
        for (const [k, x] of Object.entries(v)) walk(x, k);
      } else if (Array.isArray(v)) {
        for (const x of v) walk(x, key);
      } else {
        parts.push(key === null || key === undefined ? String(v) : `${key} ${v}`);
      }
    };
    walk(value, null);
    return parts.join(" ");
  }

  function factText(fact) {
    return `${fact.predicate.replace(/_/g, " ")}: ${valueText(fact.value)}`;
  }

  function params(query) {
    return Object.fromEntries(new URLSearchParams(query || ""));
  }

  function hashFor(path, args) {
    const q = new URLSearchParams(Object.entries(args || {}).filter(([, v]) => v));
    const s = q.toString();
    return `#/${path}${s ? `?${s}` : ""}`;
  }

  // ---------------------------------------------------------------- the API

  class ApiError extends Error {
    constructor(message, code) {
      super(message);
      this.code = code || "ERROR";
    }
  }

  function apiKey() {
    return sessionStorage.getItem(KEY_STORE) || "";
  }

  async function gql(query, variables) {
    const headers = { "content-type": "application/json", accept: "application/json" };
    const key = apiKey();
    if (key) headers.authorization = `Bearer ${key}`;
    let response;
    try {
      response = await fetch("/graphql", { method: "POST", headers, body: JSON.stringify({ query, variables }) });
    } catch (err) {
      throw new ApiError(`the server cannot be reached (${err.message})`, "NETWORK");
    }
    let body;
    try {
      body = await response.json();
    } catch {
      throw new ApiError(`the server answered HTTP ${response.status} without a GraphQL body`, "HTTP");
    }
    if (body.errors && body.errors.length) {
      const first = body.errors[0];
      throw new ApiError(first.message, first.extensions && first.extensions.code);
    }
    return body.data;
  }

  // One subscription over graphql-transport-ws on /graphql (the key goes in connection_init's
  // payload: a browser cannot set headers on a WebSocket). `onOpen` is called once the server
  // acknowledged the connection and the subscribe was sent; `onFail` once, when the socket
  // cannot open, is refused, or closes; the caller then falls back to polling.
  function subscribe(query, variables, { onNext, onOpen, onFail }) {
    const url = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/graphql`;
    let ws;
    let done = false;
    const fail = (why) => {
      if (done) return;
      done = true;
      try {
        ws.close();
      } catch {
        /* already closed */
      }
      onFail(why);
    };
    try {
      ws = new WebSocket(url, "graphql-transport-ws");
    } catch (err) {
      setTimeout(() => fail(err.message), 0);
      return { close() {} };
    }
    ws.onopen = () => {
      const key = apiKey();
      const payload = key ? { Authorization: `Bearer ${key}` } : {};
      ws.send(JSON.stringify({ type: "connection_init", payload }));
    };
    ws.onmessage = (event) => {
      let msg;
      try {
        msg = JSON.parse(event.data);
      } catch {
        return;
      }
      if (msg.type === "connection_ack") {
        ws.send(JSON.stringify({ id: "1", type: "subscribe", payload: { query, variables } }));
        onOpen();
      } else if (msg.type === "next" && msg.payload) {
        if (msg.payload.errors && msg.payload.errors.length) fail(msg.payload.errors[0].message);
        else if (msg.payload.data) onNext(msg.payload.data);
      } else if (msg.type === "error") {
        fail(Array.isArray(msg.payload) && msg.payload[0] ? msg.payload[0].message : "refused");
      } else if (msg.type === "complete") {
        fail("the server ended the subscription");
      } else if (msg.type === "ping") {
        ws.send(JSON.stringify({ type: "pong" }));
      }
    };
    ws.onerror = () => fail("the websocket failed");
    ws.onclose = (event) => fail(`the websocket closed (${event.code})`);
    return {
      close() {
        done = true;
        try {
          ws.close(1000);
        } catch {
          /* already closed */
        }
      },
    };
  }

  // ---------------------------------------------------------------- queries

  const TRACE_ROW = `fragment TraceRow on ContextTrace {
    id subjectId query budgetTokens usedTokens status emptyReason warnings createdAt
    counts { included excluded blocked }
    timings { totalMs }
    served: decisions(decision: INCLUDED) { itemKind reasonCode }
  }`;

  const TRACES = `query DashboardTraces($subjectId: String, $first: Int, $after: String) {
    traces(subjectId: $subjectId, first: $first, after: $after) {
      edges { cursor node { ...TraceRow } }
      pageInfo { hasNextPage endCursor }
    }
  }
  ${TRACE_ROW}`;

  const TRACE_ADDED = `subscription DashboardTraceAdded($subjectId: String) {
    traceAdded(subjectId: $subjectId) { ...TraceRow }
  }
  ${TRACE_ROW}`;

  const SOURCE = `id kind occurredAt excerpt`;

  // What a decision row shows of its item: the fact or the event, with its sources.
  const DECIDED_ITEM = `fact { id predicate value status volatility validFrom validTo recordedAt lastReinforcedAt
        sourceEvents { ${SOURCE} } }
      event { ${SOURCE} }`;

  const TRACE = `query DashboardTrace($id: ID!) {
    trace(id: $id) {
      id subjectId query budgetTokens usedTokens status emptyReason warnings createdAt asOf rendered
      settings { id rankingProfile values }
      counts { included excluded blocked }
      timings { embedMs retrieveMs packMs persistMs totalMs }
      decisions {
        itemKind itemId chunk decision reasonCode rank overallRank score similarity fullText recency distance tokens viaEntity
        ${DECIDED_ITEM}
      }
    }
  }`;

  // The stored call asked again, at its own instant or of the memory now, with the diff.
  const REPLAY = `query DashboardReplay($id: ID!, $with: ReplayOverrides, $now: Boolean!) {
    replay(traceId: $id, with: $with, compareWithNow: $now) {
      asOf comparedWithNow notes
      settings { id rankingProfile values }
      packet { rendered usedTokens budgetTokens status }
      diff {
        identical added removed moved scoreChanged decisionChanged
        changes {
          itemKind itemId chunk kinds rankDelta componentsChanged why
          before { decision reasonCode rank score similarity fullText recency distance tokens viaEntity ${DECIDED_ITEM} }
          after { decision reasonCode rank score similarity fullText recency distance tokens viaEntity ${DECIDED_ITEM} }
        }
      }
    }
  }`;

  const CONFLICTS_OF = `query DashboardConflicts($subjectId: String!, $after: String) {
    conflicts(subjectId: $subjectId, first: 100, after: $after) {
      edges { node { id status reason createdAt resolvedAt facts { id } keptFact { id } } }
      pageInfo { hasNextPage endCursor }
    }
  }`;

  const FACT_FIELDS = `id predicate value confidence status volatility validFrom validTo recordedAt lastReinforcedAt version
    sourceEvents { ${SOURCE} } supersededBy { id predicate value }`;

  const FACTS = `query DashboardFacts($subjectId: String!, $status: FactStatus, $after: String) {
    facts(subjectId: $subjectId, status: $status, first: 50, after: $after) {
      edges { node { ${FACT_FIELDS} } }
      pageInfo { hasNextPage endCursor }
    }
  }`;

  const OPEN_CONFLICTS = `query DashboardOpenConflicts($subjectId: String!, $status: ConflictStatus, $after: String) {
    conflicts(subjectId: $subjectId, status: $status, first: 50, after: $after) {
      edges { node { id status reason createdAt resolvedAt
        facts { id predicate value status volatility validFrom recordedAt sourceEvents { ${SOURCE} } }
        keptFact { id } } }
      pageInfo { hasNextPage endCursor }
    }
  }`;

  const EVENTS = `query DashboardEvents($subjectId: String!, $after: String) {
    events(subjectId: $subjectId, first: 100, after: $after) {
      edges { node { id kind occurredAt recordedAt excerpt } }
      pageInfo { hasNextPage endCursor }
    }
  }`;

  const RECENT_SUBJECTS = `query DashboardRecentSubjects {
    traces(first: 100) { edges { node { subjectId createdAt } } }
  }`;

  const EVENT = `query DashboardEvent($id: ID!) {
    event(id: $id) { id subjectId kind payload occurredAt recordedAt excerpt }
  }`;

  const RESOLVE = `mutation DashboardResolve($id: ID!, $keep: ID!) {
    resolveConflict(id: $id, keepFactId: $keep) { id status keptFact { id } }
  }`;

  const DISMISS = `mutation DashboardDismiss($id: ID!) { dismissConflict(id: $id) { id status } }`;

  const STATS = `query DashboardStats($since: DateTime) {
    stats(since: $since) {
      contextCalls injectionRate emptyCalls noRelevantMemoryCalls degradedCalls avgFactsServed avgUsedTokens
      latencyP50Ms latencyP95Ms activeFacts events openConflicts oldestOpenConflictSeconds
      reasonCodes { reasonCode count }
    }
  }`;

  // ---------------------------------------------------------------- shell

  const view = () => $("#view");
  let current = null; // the view on screen: { stop() } to release its timers and sockets

  function banner(message) {
    const el = $("#banner");
    el.hidden = !message;
    el.textContent = message || "";
  }

  function showError(err) {
    const code = err && err.code ? `${err.code}: ` : "";
    const hint = err && err.code === "UNAUTHENTICATED" ? " Type an API key above (or run the server in development mode)." : "";
    banner(`${code}${err && err.message ? err.message : err}${hint}`);
  }

  function setupKeyForm() {
    const input = $("#key-input");
    const state = $("#key-state");
    const show = () => {
      state.textContent = apiKey() ? "key set for this tab" : "no key (development mode)";
    };
    input.value = apiKey();
    show();
    $("#key-form").addEventListener("submit", (event) => {
      event.preventDefault();
      const key = input.value.trim();
      if (key) sessionStorage.setItem(KEY_STORE, key);
      else sessionStorage.removeItem(KEY_STORE);
      show();
      route();
    });
  }

  function route() {
    if (current && current.stop) current.stop();
    current = null;
    banner("");
    const hash = location.hash.replace(/^#\/?/, "") || "traces";
    const [path, query] = hash.split("?");
    const [name, ...rest] = path.split("/");
    const arg = rest.length ? decodeURIComponent(rest.join("/")) : "";
    for (const link of $$("nav a[data-view]")) link.classList.toggle("active", link.dataset.view === name);
    const args = params(query);
    const views = { traces: liveTraces, trace: oneTrace, subject: subjectView, event: eventView, stats: statsView };
    const make = views[name] || liveTraces;
    current = make(arg, args) || null;
  }

  // ---------------------------------------------------------------- live traces

  const STATUS_FILTERS = {
    "": () => true,
    OK: (t) => t.status === "OK",
    DEGRADED: (t) => t.status === "DEGRADED",
    EMPTY: (t) => t.served.length === 0,
    NO_RELEVANT_MEMORY: (t) => t.emptyReason === "NO_RELEVANT_MEMORY",
  };

  const WARNING_FILTERS = {
    "": () => true,
    any: (t) => t.warnings.length > 0,
    open_conflict: (t) => t.warnings.some((w) => w.startsWith("open_conflict")),
    volatility_expired: (t) => t.warnings.some((w) => w.startsWith("volatility_expired")),
  };

  function servedCounts(trace) {
    let facts = 0;
    let hops = 0;
    let episodes = 0;
    for (const d of trace.served) {
      if (d.itemKind === "EPISODE") episodes += 1;
      else if (d.reasonCode === "MULTI_HOP_EXPANSION") hops += 1;
      else facts += 1;
    }
    return { facts, hops, episodes };
  }

  function statusBadge(trace) {
    const empty = trace.served && trace.served.length === 0;
    let html = `<span class="badge ${trace.status === "OK" ? "ok" : "warn"}">${esc(trace.status)}</span>`;
    if (trace.emptyReason) html += ` <span class="badge muted-badge">${esc(trace.emptyReason)}</span>`;
    else if (empty) html += ` <span class="badge muted-badge">EMPTY</span>`;
    return html;
  }

  function tokenBar(used, budget) {
    const share = budget > 0 ? Math.min(1, used / budget) : 0;
    return `<span class="mini-bar" title="${used} of ${budget} tokens"><span style="width:${(share * 100).toFixed(1)}%"></span></span>`;
  }

  function traceRow(t, fresh) {
    const c = servedCounts(t);
    const warnings = t.warnings.map((w) => `<div class="warning">${esc(w)}</div>`).join("");
    return `<tr data-trace="${esc(t.id)}"${fresh && fresh.has(t.id) ? ' class="fresh"' : ""}>
      <td class="nowrap" title="${esc(t.createdAt)}">${esc(clock(t.createdAt))}</td>
      <td class="subject"><a href="${hashFor(`subject/${enc(t.subjectId)}`)}">${esc(t.subjectId)}</a></td>
      <td class="query"><a class="open-trace" href="#/trace/${enc(t.id)}">${esc(t.query) || "<em>(empty query)</em>"}</a></td>
      <td class="nowrap">${statusBadge(t)}</td>
      <td>${warnings}</td>
      <td class="num">${c.facts}${c.hops ? ` <span class="muted">+${c.hops} hop</span>` : ""}</td>
      <td class="num">${c.episodes}</td>
      <td class="num nowrap">${t.usedTokens} / ${t.budgetTokens} ${tokenBar(t.usedTokens, t.budgetTokens)}</td>
      <td class="num nowrap">${esc(ms(t.timings.totalMs))}</td>
    </tr>`;
  }

  function liveTraces(_arg, args) {
    const state = {
      subject: args.subject || "",
      status: args.status || "",
      warning: args.warning || "",
      rows: [],
      seen: new Set(),
      fresh: new Set(), // calls that arrived while the page was open, highlighted a moment
      endCursor: null,
      hasNext: false,
      mode: "starting",
      stopped: false,
    };
    let pollTimer = null;
    let retryTimer = null;
    let sub = null;

    view().innerHTML = `
      <section>
        <h1>Live traces</h1>
        <form id="trace-filters" class="filters">
          <label>Subject <input name="subject" value="${esc(state.subject)}" placeholder="every subject"></label>
          <label>Status <select name="status">
            ${Object.keys(STATUS_FILTERS)
              .map((k) => `<option value="${k}" ${k === state.status ? "selected" : ""}>${k ? k.replace(/_/g, " ").toLowerCase() : "any"}</option>`)
              .join("")}
          </select></label>
          <label>Warning <select name="warning">
            ${Object.keys(WARNING_FILTERS)
              .map((k) => `<option value="${k}" ${k === state.warning ? "selected" : ""}>${k ? k.replace(/_/g, " ") : "any or none"}</option>`)
              .join("")}
          </select></label>
          <button type="submit">Apply</button>
          <span id="live-state" class="live-state"></span>
        </form>
        <table class="grid traces">
          <thead><tr><th>Time</th><th>Subject</th><th>Query</th><th>Status</th><th>Warnings</th>
            <th class="num">Facts</th><th class="num">Episodes</th><th class="num">Tokens used / budget</th><th class="num">Latency</th></tr></thead>
          <tbody id="trace-rows"></tbody>
        </table>
        <p id="trace-empty" class="muted" hidden></p>
        <p class="pager"><button id="older" type="button" hidden>Older traces</button> <span id="trace-count" class="muted"></span></p>
      </section>`;

    $("#trace-filters").addEventListener("submit", (event) => {
      event.preventDefault();
      const form = new FormData(event.target);
      location.hash = hashFor("traces", {
        subject: String(form.get("subject") || "").trim(),
        status: form.get("status"),
        warning: form.get("warning"),
      });
    });
    $("#older").addEventListener("click", () => loadOlder().catch(showError));

    const visible = (t) => STATUS_FILTERS[state.status](t) && WARNING_FILTERS[state.warning](t);

    function paint() {
      const shown = state.rows.filter(visible);
      $("#trace-rows").innerHTML = shown
        .slice(0, LISTED_MAX)
        .map((t) => traceRow(t, state.fresh))
        .join("");
      const empty = $("#trace-empty");
      empty.hidden = shown.length > 0;
      empty.textContent = state.rows.length
        ? "No loaded trace matches these filters; older ones may (Older traces)."
        : "No context call yet. Calls appear here as agents make them.";
      $("#older").hidden = !state.hasNext;
      let count = `${shown.length} shown of ${state.rows.length} loaded`;
      if (shown.length > LISTED_MAX) count += ` (the newest ${LISTED_MAX} listed)`;
      if (state.trimmed) count += "; older calls were let go from this live list: reload the page to page through them";
      $("#trace-count").textContent = count;
    }

    let paintTimer = null;
    function schedulePaint() {
      if (paintTimer === null) {
        paintTimer = setTimeout(() => {
          paintTimer = null;
          if (!state.stopped) paint();
        }, PAINT_MS);
      }
    }

    function paintMode() {
      const el = $("#live-state");
      if (!el) return;
      const text = {
        starting: "connecting",
        subscription: "live (subscription)",
        polling: `live (polling every ${POLL_MS / 1000} s)`,
      }[state.mode];
      el.textContent = text;
      el.className = `live-state ${state.mode}`;
      el.title = state.mode === "polling" ? `no subscription: ${state.why || "unavailable"}` : "";
    }

    // New traces go on top, newest first; one already listed is never listed twice.
    function addNewest(traces) {
      const fresh = traces.filter((t) => !state.seen.has(t.id));
      if (!fresh.length) return;
      for (const t of fresh) {
        state.seen.add(t.id);
        state.fresh.add(t.id);
        setTimeout(() => state.fresh.delete(t.id), 3000);
      }
      state.rows = fresh.concat(state.rows);
      state.rows.sort((a, b) => (a.createdAt < b.createdAt ? 1 : a.createdAt > b.createdAt ? -1 : 0));
      if (state.rows.length > KEPT_MAX) {
        state.rows.length = KEPT_MAX;
        state.trimmed = true;
        state.hasNext = false; // the cursor no longer follows the last row kept
      }
      schedulePaint();
    }

    async function firstPage() {
      const data = await gql(TRACES, { subjectId: state.subject || null, first: PAGE, after: null });
      const nodes = data.traces.edges.map((e) => e.node);
      for (const t of nodes) state.seen.add(t.id);
      state.rows = nodes;
      state.endCursor = data.traces.pageInfo.endCursor;
      state.hasNext = data.traces.pageInfo.hasNextPage;
      paint();
    }

    async function loadOlder() {
      if (!state.endCursor) return;
      const data = await gql(TRACES, { subjectId: state.subject || null, first: PAGE, after: state.endCursor });
      const nodes = data.traces.edges.map((e) => e.node).filter((t) => !state.seen.has(t.id));
      for (const t of nodes) state.seen.add(t.id);
      state.rows = state.rows.concat(nodes);
      state.endCursor = data.traces.pageInfo.endCursor;
      state.hasNext = data.traces.pageInfo.hasNextPage;
      paint();
    }

    // Polling reads the newest page and follows cursors until it meets a trace it already
    // has (at most a few pages), so a burst of calls between two polls is not skipped.
    async function pollOnce() {
      let after = null;
      const found = [];
      for (let page = 0; page < 5; page += 1) {
        const data = await gql(TRACES, { subjectId: state.subject || null, first: 20, after });
        const nodes = data.traces.edges.map((e) => e.node);
        let met = false;
        for (const t of nodes) {
          if (state.seen.has(t.id)) {
            met = true;
            break;
          }
          found.push(t);
        }
        if (met || !data.traces.pageInfo.hasNextPage || !state.rows.length) break;
        after = data.traces.pageInfo.endCursor;
      }
      addNewest(found);
    }

    function startPolling(why) {
      if (state.stopped) return;
      state.mode = "polling";
      state.why = why;
      paintMode();
      const tick = async () => {
        if (state.stopped || state.mode !== "polling") return;
        try {
          await pollOnce();
        } catch (err) {
          showError(err);
        }
        if (!state.stopped && state.mode === "polling") pollTimer = setTimeout(tick, POLL_MS);
      };
      pollTimer = setTimeout(tick, POLL_MS);
      retryTimer = setTimeout(() => {
        if (state.stopped) return;
        clearTimeout(pollTimer);
        startLive();
      }, RESUBSCRIBE_MS);
    }

    function startLive() {
      if (state.stopped) return;
      state.mode = "starting";
      paintMode();
      sub = subscribe(
        TRACE_ADDED,
        { subjectId: state.subject || null },
        {
          onNext(data) {
            if (data.traceAdded) addNewest([data.traceAdded]);
          },
          onOpen() {
            state.mode = "subscription";
            paintMode();
            // Catch up on calls made while the socket opened (the first page was read before),
            // once the server has had a moment to start listening.
            setTimeout(() => {
              if (!state.stopped) pollOnce().catch(showError);
            }, 300);
          },
          onFail(why) {
            sub = null;
            startPolling(why);
          },
        },
      );
    }

    // A key that is refused stays refused: the page waits for another key instead of polling.
    const FINAL = new Set(["UNAUTHENTICATED", "FORBIDDEN", "INVALID_INPUT"]);
    firstPage()
      .then(startLive)
      .catch((err) => {
        showError(err);
        if (!FINAL.has(err.code)) startPolling(err.message);
      });

    return {
      stop() {
        state.stopped = true;
        clearTimeout(pollTimer);
        clearTimeout(retryTimer);
        clearTimeout(paintTimer);
        if (sub) sub.close();
      },
    };
  }

  // ---------------------------------------------------------------- one trace

  // The conflict set that held a fact when the trace was made: created before it, and not
  // yet resolved or dismissed then.
  function conflictAt(sets, factId, instant) {
    const candidates = sets.filter((s) => s.facts.some((f) => f.id === factId) && s.createdAt <= instant);
    const open = candidates.find((s) => !s.resolvedAt || s.resolvedAt > instant);
    return open || candidates[0] || null;
  }

  function horizon(fact) {
    const days = HORIZON_DAYS[fact.volatility];
    if (!days) return null;
    const base = fact.lastReinforcedAt || fact.validFrom || fact.recordedAt;
    const end = new Date(new Date(base).getTime() + days * 86400000);
    return { days, base, end: end.toISOString() };
  }

  function sourcesOf(d) {
    if (d.fact) {
      return d.fact.sourceEvents
        .map((e) => `<a href="#/event/${enc(e.id)}" title="${esc(e.excerpt)}">${esc(e.kind)} ${esc(day(e.occurredAt))}</a>`)
        .join("<br>");
    }
    if (d.event) return `<a href="#/event/${enc(d.event.id)}">${esc(d.event.kind)} ${esc(day(d.event.occurredAt))}</a>`;
    return "";
  }

  // Long items are cut on screen; the whole text is in the tooltip.
  function clip(text, limit = 180) {
    const full = String(text);
    return full.length > limit ? `<span title="${esc(full)}">${esc(full.slice(0, limit))}…</span>` : esc(full);
  }

  function itemText(d) {
    if (d.fact) return clip(factText(d.fact));
    if (d.event) return `${clip(d.event.excerpt)}${d.chunk ? ` <span class="muted">(chunk ${d.chunk})</span>` : ""}`;
    return `<span class="muted">${esc(d.itemId)} (no longer readable)</span>`;
  }

  function detailOf(d, trace, sets) {
    if (d.reasonCode === "CONFLICT_OPEN" && d.fact) {
      const set = conflictAt(sets, d.fact.id, trace.createdAt);
      if (!set) return "in an open conflict set";
      const now = set.status === "OPEN" ? "still open" : `${set.status.toLowerCase()} ${when(set.resolvedAt)}`;
      return `conflict <a href="${hashFor(`subject/${enc(trace.subjectId)}`)}" title="${esc(set.id)}">${esc(set.id.slice(0, 8))}</a>
        opened ${esc(when(set.createdAt))}${set.reason ? `: ${esc(set.reason)}` : ""} (${esc(now)})`;
    }
    if (d.reasonCode === "VOLATILITY_EXPIRED" && d.fact) {
      const h = horizon(d.fact);
      if (!h) return `${esc(d.fact.volatility)} fact past its horizon`;
      return `${esc(d.fact.volatility)}: ${h.days} d from ${esc(day(h.base))}, expired ${esc(day(h.end))}`;
    }
    if (d.reasonCode === "CITED_BY_FACT") {
      // The fact served by score, and ranked above the turn, that cites it.
      const citing = trace.decisions.find(
        (x) =>
          x.reasonCode === "TOP_SCORE" &&
          x.fact &&
          x.score >= d.score &&
          x.fact.sourceEvents.some((e) => e.id === d.itemId),
      );
      return citing ? `the served fact “${clip(factText(citing.fact), 80)}” cites this turn` : "a served fact cites this turn";
    }
    if (d.reasonCode === "SOURCES_SERVED" && d.fact) {
      const cited = new Set(d.fact.sourceEvents.map((e) => e.id));
      const served = trace.decisions.filter((x) => x.itemKind === "EPISODE" && x.decision === "INCLUDED" && cited.has(x.itemId));
      const links = served.map((x) => `<a href="#/event/${enc(x.itemId)}">${esc(x.event ? clip(x.event.excerpt, 60) : x.itemId)}</a>`);
      return `its source turns are served above it: ${links.join(", ") || "(not readable)"}`;
    }
    if (d.reasonCode === "SAME_TEXT_SERVED") return "the same text is served above it";
    if (d.reasonCode === "OVER_BUDGET") return `needed ${d.tokens} tokens`;
    if (d.reasonCode === "BELOW_RELEVANCE_FLOOR") return `distance ${num(d.distance)} past the recall gate`;
    if (d.reasonCode === "MULTI_HOP_EXPANSION") return `via ${esc(d.viaEntity)}`;
    return "";
  }

  // The tokens the served items took, by part of the packet: the trace's own figures. The text
  // itself is the trace's `rendered`, rebuilt by the server's renderer, never by the page.
  function servedTokens(trace) {
    const included = trace.decisions.filter((d) => d.decision === "INCLUDED");
    const sum = (keep) => included.filter(keep).reduce((s, d) => s + d.tokens, 0);
    return {
      facts: sum((d) => d.itemKind === "FACT" && d.reasonCode !== "MULTI_HOP_EXPANSION"),
      hops: sum((d) => d.itemKind === "FACT" && d.reasonCode === "MULTI_HOP_EXPANSION"),
      episodes: sum((d) => d.itemKind === "EPISODE"),
    };
  }

  // The packet as the agent got it: `rendered` is null when a served item is no longer stored, or
  // when a line no longer comes out as the call served it.
  function packetText(trace) {
    if (trace.rendered == null) {
      return '<span class="muted">(the text cannot be rebuilt: a served item is no longer stored, or no longer renders as it was served)</span>';
    }
    return esc(trace.rendered) || '<span class="muted">(nothing served)</span>';
  }

  function budgetBar(trace, tokens) {
    const budget = Math.max(trace.budgetTokens, 1);
    const unused = Math.max(0, trace.budgetTokens - trace.usedTokens);
    const parts = [
      ["facts", "Facts", tokens.facts],
      ["hops", "Multi-hop", tokens.hops],
      ["episodes", "Episodes", tokens.episodes],
      ["unused", "Unused", unused],
    ];
    const bar = parts
      .filter(([, , n]) => n > 0)
      .map(([cls, label, n]) => `<span class="seg ${cls}" style="width:${((n / budget) * 100).toFixed(2)}%" title="${label}: ${n} tokens"></span>`)
      .join("");
    const legend = parts.map(([cls, label, n]) => `<span class="key-${cls}"><i></i>${label} ${n}</span>`).join("");
    return `<div class="budget-bar" id="budget-bar">${bar}</div><div class="legend">${legend} <span class="muted">of ${trace.budgetTokens} tokens</span></div>`;
  }

  const DECISION_FILTERS = ["", "INCLUDED", "EXCLUDED", "BLOCKED"];

  // The candidates in the order the call packed them in (`overallRank`: one ranking of facts and
  // episodes under merged packing), then the blocked facts, which are never ranked, as stored.
  function inPackingOrder(decisions) {
    const place = (d) => d.overallRank ?? Infinity;
    return decisions.map((d, i) => [d, i + 1]).sort(([a, i], [b, j]) => place(a) - place(b) || i - j);
  }

  function decisionRows(trace, sets, only) {
    const out = [];
    for (const [d, index] of inPackingOrder(trace.decisions)) {
      if (only && d.decision !== only) continue;
      const kindRank = d.rank == null ? "" : ` title="${d.itemKind === "FACT" ? "fact" : "episode"} #${d.rank} in its kind"`;
      out.push(`<tr class="decision ${d.decision.toLowerCase()}" data-index="${index}">
        <td class="num"${kindRank}>${d.overallRank ?? ""}</td>
        <td>${d.itemKind === "FACT" ? "fact" : "episode"}</td>
        <td class="item">${itemText(d)}</td>
        <td><span class="badge d-${d.decision.toLowerCase()}">${d.decision}</span></td>
        <td class="code">${d.reasonCode}</td>
        <td class="num" data-c="score">${num(d.score)}</td>
        <td class="num" data-c="similarity">${num(d.similarity)}</td>
        <td class="num" data-c="fullText">${num(d.fullText)}</td>
        <td class="num" data-c="recency">${num(d.recency)}</td>
        <td class="num" data-c="distance">${num(d.distance)}</td>
        <td class="num" data-c="tokens">${d.tokens}</td>
        <td class="detail">${detailOf(d, trace, sets)}</td>
        <td class="sources">${sourcesOf(d)}</td>
      </tr>`);
    }
    return out.join("");
  }

  async function conflictSets(subjectId) {
    const sets = [];
    let after = null;
    for (let page = 0; page < 5; page += 1) {
      const data = await gql(CONFLICTS_OF, { subjectId, after });
      sets.push(...data.conflicts.edges.map((e) => e.node));
      if (!data.conflicts.pageInfo.hasNextPage) break;
      after = data.conflicts.pageInfo.endCursor;
    }
    return sets;
  }

  // ---------------------------------------------------------------- a replay of the trace

  const CHANGE_LABELS = {
    ADDED: "added",
    REMOVED: "removed",
    MOVED: "moved",
    SCORE_CHANGED: "rescored",
    DECISION_CHANGED: "decision changed",
  };

  // The overrides a replay may take: another budget, another ranking profile, or the server's
  // current settings; left empty, the call runs under the settings it ran under.
  function replayForm(trace) {
    const recorded = trace.settings ? trace.settings.rankingProfile : "not recorded";
    return `<form class="filters replay-form" id="replay-form">
        <label>Budget <input type="number" name="budget" min="1" step="1" placeholder="${trace.budgetTokens}"></label>
        <label>Profile <select name="profile">
          <option value="">as recorded (${esc(recorded)})</option>
          <option value="DEFAULT">default</option>
          <option value="CLASSIC">classic</option>
        </select></label>
        <label><input type="checkbox" name="current"> the server's current settings</label>
        <button type="submit" id="replay-run" title="Ask the same question at the call's own instant, from the memory as it stood then">Replay</button>
        <button type="button" id="replay-now" title="Ask the same question of the memory as it stands now">Compare with now</button>
      </form>
      <div id="replay" class="replay"></div>`;
  }

  function replayOverrides(form) {
    const overrides = {};
    const budget = form.elements.budget.value.trim();
    if (budget) overrides.budget = Number(budget);
    if (form.elements.profile.value) overrides.profile = form.elements.profile.value;
    if (form.elements.current.checked) overrides.currentSettings = true;
    return Object.keys(overrides).length ? overrides : null;
  }

  function decisionCell(d) {
    if (!d) return '<span class="muted">not considered</span>';
    const rank = d.rank == null ? "" : ` <span class="muted">#${d.rank}</span>`;
    return `<span class="badge d-${d.decision.toLowerCase()}">${d.decision}</span> <span class="code">${d.reasonCode}</span>${rank}`;
  }

  // Each component that moved, from the stored value to the replay's ("none" where the item was
  // not scored, e.g. blocked); a change too small for three places is shown as its difference.
  function componentsText(c) {
    if (!c.before || !c.after) return "";
    const shown = (value) => (value == null ? "none" : num(value));
    return c.componentsChanged
      .map((name) => {
        const [a, b] = [c.before[name], c.after[name]];
        const tiny = a != null && b != null && shown(a) === shown(b);
        const delta = tiny ? ` <span class="muted">(${b > a ? "+" : ""}${(b - a).toExponential(1)})</span>` : "";
        return `${esc(name)} ${shown(a)} → ${shown(b)}${delta}`;
      })
      .join("<br>");
  }

  function changeRows(changes) {
    return changes
      .map((c) => {
        const item = { ...(c.after || c.before), itemId: c.itemId, itemKind: c.itemKind, chunk: c.chunk };
        const delta = c.rankDelta == null ? "" : `${c.rankDelta > 0 ? "+" : ""}${c.rankDelta}`;
        return `<tr class="change" data-item="${esc(c.itemId)}" data-kinds="${esc(c.kinds.join(" "))}">
          <td>${c.itemKind === "FACT" ? "fact" : "episode"}</td>
          <td class="item">${itemText(item)}</td>
          <td>${c.kinds.map((k) => `<span class="badge k-${k.toLowerCase()}">${CHANGE_LABELS[k] || esc(k)}</span>`).join(" ")}</td>
          <td data-c="before">${decisionCell(c.before)}</td>
          <td data-c="after">${decisionCell(c.after)}</td>
          <td class="num" data-c="rankDelta">${delta}</td>
          <td class="components" data-c="components">${componentsText(c)}</td>
          <td class="detail" data-c="why">${esc(c.why || "")}</td>
        </tr>`;
      })
      .join("");
  }

  // The decision settings the replay ran under that differ from the call's own.
  function settingsChanged(r, trace) {
    if (!trace.settings || trace.settings.id === r.settings.id) return "";
    const before = trace.settings.values || {};
    const after = r.settings.values || {};
    const names = [...new Set([...Object.keys(before), ...Object.keys(after)])].sort();
    const changed = names.filter((n) => JSON.stringify(before[n]) !== JSON.stringify(after[n]));
    if (!changed.length) return "";
    const rows = changed.map((n) => `<code>${esc(n)}</code> ${esc(json(before[n]))} → ${esc(json(after[n]))}`);
    return `<p class="small" id="replay-settings">Settings changed: ${rows.join(" · ")}</p>`;
  }

  function replayResult(r, trace) {
    const d = r.diff;
    const where = r.comparedWithNow
      ? `Asked of the memory as it stands now (${when(r.asOf)})`
      : `Asked again at the call's own instant (${when(r.asOf)})`;
    const counts = [
      ["added", d.added],
      ["removed", d.removed],
      ["moved", d.moved],
      ["rescored", d.scoreChanged],
      ["decision changed", d.decisionChanged],
    ];
    const verdict = d.identical
      ? '<span class="done">Identical</span>: every candidate was decided as the stored call decided it.'
      : counts.map(([label, n]) => `<span class="count">${n} ${label}</span>`).join(" · ");
    const table = d.changes.length
      ? `<table class="grid decisions changes" id="replay-changes">
          <thead><tr><th>Kind</th><th>Item</th><th>Change</th><th>Stored call</th><th>Replay</th>
            <th class="num" title="The replay's rank less the stored one (negative: moved up)">Rank Δ</th>
            <th>Components</th><th>Why</th></tr></thead>
          <tbody>${changeRows(d.changes)}</tbody>
        </table>`
      : "";
    return `<p class="replay-where">${esc(where)}, under the settings <strong>${esc(r.settings.rankingProfile)}</strong>
        <code title="${esc(r.settings.id)}">${esc(r.settings.id.slice(0, 8))}</code>.</p>
      ${r.notes.map((n) => `<p class="muted small replay-note">${esc(n)}</p>`).join("")}
      ${settingsChanged(r, trace)}
      <p id="replay-summary" class="replay-summary">${verdict}</p>
      <p>Tokens: ${r.packet.usedTokens} / ${r.packet.budgetTokens}
        <span class="muted">(the stored call: ${trace.usedTokens} / ${trace.budgetTokens})</span></p>
      ${table}
      <details><summary>The replay's packet</summary>
        <pre class="packet" id="replay-packet">${esc(r.packet.rendered) || '<span class="muted">(nothing served)</span>'}</pre></details>`;
  }

  // Wires the form: each run asks replay() once; its result, or its error, replaces the last.
  function setupReplay(trace, isStopped) {
    const form = $("#replay-form");
    const out = $("#replay");
    const run = async (now) => {
      const buttons = $$("button", form);
      for (const b of buttons) b.disabled = true;
      out.dataset.state = "running";
      out.innerHTML = `<p class="muted">${now ? "Asking the memory as it stands now" : "Replaying the call at its own instant"}…</p>`;
      try {
        const data = await gql(REPLAY, { id: trace.id, with: replayOverrides(form), now });
        if (isStopped()) return;
        out.innerHTML = replayResult(data.replay, trace);
        out.dataset.state = now ? "now" : "replayed";
      } catch (err) {
        if (isStopped()) return;
        out.innerHTML = `<p class="warning" id="replay-error">${esc(err.code || "ERROR")}: ${esc(err.message || err)}</p>`;
        out.dataset.state = "failed";
      } finally {
        for (const b of buttons) b.disabled = false;
      }
    };
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      run(false);
    });
    $("#replay-now").addEventListener("click", () => run(true));
  }

  function oneTrace(id) {
    let stopped = false;
    view().innerHTML = `<section><h1>Trace</h1><p class="muted">Loading ${esc(id)}…</p></section>`;
    (async () => {
      const started = performance.now();
      const data = await gql(TRACE, { id });
      const trace = data.trace;
      if (stopped) return;
      if (!trace) {
        view().innerHTML = `<section><h1>Trace</h1><p>No trace ${esc(id)} in this project (it may have been pruned by retention, or the key is another project's).</p></section>`;
        return;
      }
      const blocked = trace.decisions.some((d) => d.reasonCode === "CONFLICT_OPEN");
      const sets = blocked ? await conflictSets(trace.subjectId) : [];
      if (stopped) return;
      const fetched = performance.now();
      const tokens = servedTokens(trace);
      const t = trace.timings;
      const graphiql = `/graphql?q=${enc(`query Trace {\n  trace(id: "${trace.id}") {\n    query status warnings rendered\n    decisions { itemKind decision reasonCode overallRank rank score similarity fullText recency tokens }\n  }\n}`)}`;
      view().innerHTML = `
        <section class="trace-view" data-trace="${esc(trace.id)}">
          <p class="crumbs"><a href="${hashFor("traces")}">Live traces</a> › trace <code>${esc(trace.id)}</code></p>
          <h1 class="query-title">${esc(trace.query) || "<em>(empty query)</em>"}</h1>
          <dl class="facts-line">
            <div><dt>Subject</dt><dd><a href="${hashFor(`subject/${enc(trace.subjectId)}`)}">${esc(trace.subjectId)}</a></dd></div>
            <div><dt>At</dt><dd>${esc(when(trace.createdAt))}</dd></div>
            <div><dt>Status</dt><dd>${statusBadge({ ...trace, served: trace.decisions.filter((d) => d.decision === "INCLUDED") })}</dd></div>
            <div><dt>Tokens</dt><dd>${trace.usedTokens} / ${trace.budgetTokens}</dd></div>
            <div><dt>Decisions</dt><dd>${trace.counts.included} included · ${trace.counts.excluded} excluded · ${trace.counts.blocked} blocked</dd></div>
            <div><dt>Latency</dt><dd>${esc(ms(t.totalMs))} <span class="muted">(embed ${esc(ms(t.embedMs))}, retrieve ${esc(ms(t.retrieveMs))}, pack ${esc(ms(t.packMs))}, persist ${esc(ms(t.persistMs))})</span></dd></div>
            ${trace.asOf ? `<div><dt>As of</dt><dd id="trace-as-of">${esc(when(trace.asOf))}</dd></div>` : ""}
            <div><dt>Settings</dt><dd>${trace.settings ? `${esc(trace.settings.rankingProfile)} <code title="${esc(trace.settings.id)}">${esc(trace.settings.id.slice(0, 8))}</code>` : '<span class="muted">not recorded</span>'}</dd></div>
          </dl>
          ${trace.warnings.map((w) => `<p class="warning">${esc(w)}</p>`).join("")}
          <h2>Replay</h2>
          <p class="muted small">Ask the same question again: at the call's own instant, from the memory as it stood then (with the settings it ran under, or the changes below), or of the memory as it stands now. Nothing is written; the diff says what each item's decision became, and why.</p>
          ${replayForm(trace)}
          <h2>Budget</h2>
          ${budgetBar(trace, tokens)}
          <h2>Packet as served</h2>
          <pre class="packet" id="packet">${packetText(trace)}</pre>
          <p class="muted small" id="packet-caption">The text the agent got as <code>context.rendered</code>: the trace's <code>rendered</code>, rebuilt by the server's own renderer from the served items under the settings the call ran under. It lists the served facts, then multi-hop facts, then episodes, each kind in rank order.</p>
          <h2>Candidates in rank order</h2>
          <p class="muted small">Rank is the order the call packed its candidates in (<code>overallRank</code>): under merged packing, facts and episodes in one ranking by score, then multi-hop facts; under sections packing, facts, multi-hop facts, then episodes. Blocked facts are never ranked and come last; a rank's tooltip gives its place within its kind.</p>
          <p class="filters">Show
            ${DECISION_FILTERS.map((k) => `<label><input type="radio" name="only" value="${k}" ${k ? "" : "checked"}> ${k ? k.toLowerCase() : "all"}</label>`).join(" ")}
            · <a href="${esc(graphiql)}">open this query in GraphiQL</a></p>
          <table class="grid decisions" id="decisions">
            <thead><tr><th class="num">Rank</th><th>Kind</th><th>Item</th><th>Decision</th><th>Reason</th>
              <th class="num">Score</th><th class="num">Similarity</th><th class="num">Full text</th><th class="num">Recency</th>
              <th class="num">Distance</th><th class="num">Tokens</th><th>Why</th><th>Sources</th></tr></thead>
            <tbody>${decisionRows(trace, sets, "")}</tbody>
          </table>
        </section>`;
      setupReplay(trace, () => stopped);
      for (const radio of $$('input[name="only"]')) {
        radio.addEventListener("change", () => {
          $("#decisions tbody").innerHTML = decisionRows(trace, sets, radio.value);
        });
      }
      // How long the page took, for the record (the browser test reads it).
      requestAnimationFrame(() => {
        document.body.dataset.traceRenderMs = String(Math.round(performance.now() - fetched));
        document.body.dataset.traceLoadMs = String(Math.round(performance.now() - started));
      });
    })().catch(showError);
    return {
      stop() {
        stopped = true;
      },
    };
  }

  // ---------------------------------------------------------------- a subject

  function validity(f) {
    const from = f.validFrom ? day(f.validFrom) : "";
    const to = f.validTo ? day(f.validTo) : "";
    if (!from && !to) return '<span class="muted">always</span>';
    return `${esc(from || "…")} → ${esc(to || "…")}`;
  }

  function factSources(f) {
    return f.sourceEvents.map((e) => `<a href="#/event/${enc(e.id)}" title="${esc(e.excerpt)}">${esc(e.kind)} ${esc(day(e.occurredAt))}</a>`).join("<br>");
  }

  function factRow(f) {
    const h = horizon(f);
    const stale = h && h.end < new Date().toISOString();
    return `<tr data-fact="${esc(f.id)}">
      <td>${esc(f.predicate)}</td>
      <td class="value">${esc(json(f.value))}</td>
      <td>${validity(f)}</td>
      <td>${esc(f.volatility.toLowerCase())}${h ? ` <span class="${stale ? "warning" : "muted"}" title="horizon ${h.days} days from ${esc(day(h.base))}">${stale ? "expired" : "until"} ${esc(day(h.end))}</span>` : ""}</td>
      <td class="num">${f.confidence ?? ""}</td>
      <td class="nowrap">${esc(when(f.recordedAt))}</td>
      <td>${factSources(f)}</td>
      <td>${f.supersededBy ? `by ${esc(f.supersededBy.predicate)} = ${esc(json(f.supersededBy.value))}` : ""}</td>
    </tr>`;
  }

  const FACT_HEAD = `<thead><tr><th>Predicate</th><th>Value</th><th>Valid</th><th>Volatility</th><th class="num">Confidence</th>
    <th>Recorded</th><th>Sources</th><th>Replaced</th></tr></thead>`;

  function conflictCard(set) {
    const facts = set.facts
      .map(
        (f) => `<li data-fact="${esc(f.id)}"><span class="value">${esc(factText(f))}</span>
          <span class="muted">recorded ${esc(when(f.recordedAt))}</span> ${factSources(f)}
          ${set.status === "OPEN" ? `<button type="button" class="keep" data-set="${esc(set.id)}" data-keep="${esc(f.id)}">Keep this one</button>` : ""}
          ${set.keptFact && set.keptFact.id === f.id ? '<span class="badge ok">kept</span>' : ""}</li>`,
      )
      .join("");
    const actions =
      set.status === "OPEN"
        ? `<button type="button" class="dismiss" data-set="${esc(set.id)}">Dismiss (serve them all again)</button>`
        : `<span class="badge muted-badge">${esc(set.status)} ${esc(when(set.resolvedAt))}</span>`;
    return `<div class="conflict ${set.status.toLowerCase()}" id="conflict-${esc(set.id)}" data-conflict="${esc(set.id)}">
      <div class="conflict-head"><strong>${set.status === "OPEN" ? "Open conflict" : "Conflict"}</strong>
        <span class="muted">opened ${esc(when(set.createdAt))}${set.reason ? ` · ${esc(set.reason)}` : ""}</span> ${actions}</div>
      <ul>${facts}</ul></div>`;
  }

  function timeline(events) {
    if (!events.length) return '<p class="muted">No events.</p>';
    const times = events.map((e) => new Date(e.occurredAt).getTime());
    const lo = Math.min(...times);
    const hi = Math.max(...times);
    const span = Math.max(hi - lo, 1);
    const W = 1000;
    const dots = events
      .map((e, i) => {
        const x = 10 + ((times[i] - lo) / span) * (W - 20);
        return `<a href="#/event/${enc(e.id)}"><circle cx="${x.toFixed(1)}" cy="20" r="5"><title>${esc(when(e.occurredAt))} ${esc(e.excerpt)}</title></circle></a>`;
      })
      .join("");
    return `<svg class="timeline" viewBox="0 0 ${W} 48" preserveAspectRatio="none" role="img" aria-label="events over time">
        <line x1="10" y1="20" x2="${W - 10}" y2="20"></line>${dots}
        <text x="10" y="44">${esc(when(new Date(lo).toISOString()))}</text>
        <text x="${W - 10}" y="44" text-anchor="end">${esc(when(new Date(hi).toISOString()))}</text>
      </svg>`;
  }

  function subjectView(subjectId) {
    let stopped = false;
    if (!subjectId) {
      view().innerHTML = `<section><h1>Subject</h1>
        <form id="subject-pick" class="filters"><label>Subject id <input name="subject" required></label> <button>Open</button></form>
        <h2>Subjects of the latest calls</h2><ul id="recent-subjects" class="recent"><li class="muted">Loading…</li></ul></section>`;
      $("#subject-pick").addEventListener("submit", (event) => {
        event.preventDefault();
        const s = String(new FormData(event.target).get("subject") || "").trim();
        if (s) location.hash = `#/subject/${enc(s)}`;
      });
      // The API lists no subjects as such: the latest page of calls names the active ones.
      gql(RECENT_SUBJECTS, {})
        .then((data) => {
          const latest = new Map();
          for (const e of data.traces.edges) if (!latest.has(e.node.subjectId)) latest.set(e.node.subjectId, e.node.createdAt);
          const items = Array.from(latest, ([s, at]) => `<li><a href="#/subject/${enc(s)}">${esc(s)}</a> <span class="muted">last call ${esc(when(at))}</span></li>`);
          const list = $("#recent-subjects");
          if (list) list.innerHTML = items.join("") || '<li class="muted">No context call yet.</li>';
        })
        .catch(showError);
      return null;
    }
    const pages = {}; // list name -> { endCursor, hasNext }
    view().innerHTML = `
      <section class="subject-view" data-subject="${esc(subjectId)}">
        <p class="crumbs"><a href="#/subject">Subjects</a> › <code>${esc(subjectId)}</code> ·
          <a href="${hashFor("traces", { subject: subjectId })}">its traces</a></p>
        <h1>${esc(subjectId)}</h1>
        <h2>Open conflicts</h2><div id="open-conflicts"><p class="muted">Loading…</p></div>
        <h2>Active facts</h2>
        <table class="grid facts" id="facts-active">${FACT_HEAD}<tbody></tbody></table>
        <p class="pager"><button type="button" data-more="ACTIVE" hidden>More</button></p>
        <h2>Superseded</h2>
        <table class="grid facts" id="facts-superseded">${FACT_HEAD}<tbody></tbody></table>
        <p class="pager"><button type="button" data-more="SUPERSEDED" hidden>More</button></p>
        <h2>Retracted</h2>
        <table class="grid facts" id="facts-retracted">${FACT_HEAD}<tbody></tbody></table>
        <p class="pager"><button type="button" data-more="RETRACTED" hidden>More</button></p>
        <h2>Closed conflicts</h2><div id="closed-conflicts"></div>
        <h2>Events</h2>
        <div id="timeline"></div>
        <table class="grid events" id="events"><thead><tr><th>Occurred</th><th>Kind</th><th>Excerpt</th></tr></thead><tbody></tbody></table>
        <p class="pager"><button type="button" data-more="EVENTS" hidden>More</button></p>
      </section>`;

    const allEvents = [];

    async function loadFacts(status, more) {
      const page = pages[status] || {};
      const data = await gql(FACTS, { subjectId, status, after: more ? page.endCursor : null });
      if (stopped) return;
      const body = $(`#facts-${status.toLowerCase()} tbody`);
      const rows = data.facts.edges.map((e) => factRow(e.node)).join("");
      if (more) body.insertAdjacentHTML("beforeend", rows);
      else body.innerHTML = rows || `<tr><td colspan="8" class="muted">None.</td></tr>`;
      pages[status] = { endCursor: data.facts.pageInfo.endCursor };
      $(`button[data-more="${status}"]`).hidden = !data.facts.pageInfo.hasNextPage;
    }

    async function loadConflicts() {
      const [open, closed] = await Promise.all([
        gql(OPEN_CONFLICTS, { subjectId, status: "OPEN", after: null }),
        gql(OPEN_CONFLICTS, { subjectId, status: null, after: null }),
      ]);
      if (stopped) return;
      const openSets = open.conflicts.edges.map((e) => e.node);
      const closedSets = closed.conflicts.edges.map((e) => e.node).filter((s) => s.status !== "OPEN");
      $("#open-conflicts").innerHTML = openSets.length ? openSets.map(conflictCard).join("") : '<p class="muted">None: every active fact is served.</p>';
      $("#closed-conflicts").innerHTML = closedSets.length ? closedSets.map(conflictCard).join("") : '<p class="muted">None.</p>';
    }

    async function loadEvents(more) {
      const page = pages.EVENTS || {};
      const data = await gql(EVENTS, { subjectId, after: more ? page.endCursor : null });
      if (stopped) return;
      const nodes = data.events.edges.map((e) => e.node);
      if (!more) allEvents.length = 0;
      allEvents.push(...nodes);
      const rows = nodes
        .map((e) => `<tr><td class="nowrap">${esc(when(e.occurredAt))}</td><td>${esc(e.kind)}</td><td><a href="#/event/${enc(e.id)}">${esc(e.excerpt)}</a></td></tr>`)
        .join("");
      const body = $("#events tbody");
      if (more) body.insertAdjacentHTML("beforeend", rows);
      else body.innerHTML = rows || `<tr><td colspan="3" class="muted">None.</td></tr>`;
      $("#timeline").innerHTML = timeline(allEvents);
      pages.EVENTS = { endCursor: data.events.pageInfo.endCursor };
      $('button[data-more="EVENTS"]').hidden = !data.events.pageInfo.hasNextPage;
    }

    async function act(work, what) {
      try {
        await work();
        banner("");
        await Promise.all([loadConflicts(), loadFacts("ACTIVE"), loadFacts("SUPERSEDED")]);
        const note = $("#open-conflicts");
        note.insertAdjacentHTML("afterbegin", `<p class="done" id="last-action">${esc(what)}</p>`);
      } catch (err) {
        showError(err);
      }
    }

    view().addEventListener("click", onClick);
    function onClick(event) {
      const button = event.target.closest("button");
      if (!button) return;
      if (button.classList.contains("keep")) {
        button.disabled = true;
        act(() => gql(RESOLVE, { id: button.dataset.set, keep: button.dataset.keep }), "Conflict resolved: the kept fact is served again, the others are superseded.");
      } else if (button.classList.contains("dismiss")) {
        button.disabled = true;
        act(() => gql(DISMISS, { id: button.dataset.set }), "Conflict dismissed: every fact of it is served again.");
      } else if (button.dataset.more) {
        const kind = button.dataset.more;
        (kind === "EVENTS" ? loadEvents(true) : loadFacts(kind, true)).catch(showError);
      }
    }

    Promise.all([loadConflicts(), loadFacts("ACTIVE"), loadFacts("SUPERSEDED"), loadFacts("RETRACTED"), loadEvents(false)]).catch(showError);
    return {
      stop() {
        stopped = true;
        view().removeEventListener("click", onClick);
      },
    };
  }

  // ---------------------------------------------------------------- an event

  function eventView(id) {
    let stopped = false;
    view().innerHTML = `<section><h1>Event</h1><p class="muted">Loading…</p></section>`;
    gql(EVENT, { id })
      .then((data) => {
        if (stopped) return;
        const e = data.event;
        view().innerHTML = e
          ? `<section class="event-view">
              <p class="crumbs"><a href="${hashFor(`subject/${enc(e.subjectId)}`)}">${esc(e.subjectId)}</a> › event <code>${esc(e.id)}</code></p>
              <h1>${esc(e.kind)}</h1>
              <p>Occurred ${esc(when(e.occurredAt))} · recorded ${esc(when(e.recordedAt))}</p>
              <pre class="packet">${esc(JSON.stringify(e.payload, null, 2))}</pre></section>`
          : `<section><h1>Event</h1><p>No event ${esc(id)} in this project.</p></section>`;
      })
      .catch(showError);
    return {
      stop() {
        stopped = true;
      },
    };
  }

  // ---------------------------------------------------------------- stats over time

  // A window and the width of its buckets (statsSeries allows 1000 buckets at most).
  const WINDOWS = {
    day: { label: "last day, hourly", ms: 86400e3, bucket: "HOUR" },
    week: { label: "last week, hourly", ms: 7 * 86400e3, bucket: "HOUR" },
    month: { label: "last 30 days, daily", ms: 30 * 86400e3, bucket: "DAY" },
    year: { label: "last year, weekly", ms: 364 * 86400e3, bucket: "WEEK" },
  };

  const SERIES = `query DashboardSeries($since: DateTime!, $bucket: StatsBucket!) {
    statsSeries(since: $since, bucket: $bucket) {
      start end contextCalls injectedCalls emptyCalls noRelevantMemoryCalls degradedCalls
      injectionRate emptyRate blockedDecisions gatedDecisions
      latency { phase p50Ms p95Ms }
    }
  }`;

  const COLORS = ["#2f6fde", "#d9822b", "#2e9d5b", "#c2410c", "#7c3aed", "#6b7280"];
  const PHASES = ["EMBED", "RETRIEVE", "PACK", "PERSIST", "TOTAL"];

  function tile(label, value, note) {
    return `<div class="tile"><div class="tile-label">${esc(label)}</div><div class="tile-value">${esc(value)}</div>${note ? `<div class="muted small">${esc(note)}</div>` : ""}</div>`;
  }

  function niceMax(value) {
    if (!(value > 0)) return 1;
    const power = 10 ** Math.floor(Math.log10(value));
    for (const step of [1, 2, 4, 8, 10]) if (step * power >= value) return step * power; // quarters stay round
    return 10 * power;
  }

  function tickLabel(date, bucket) {
    const iso = date.toISOString();
    return bucket === "HOUR" ? `${iso.slice(5, 10)} ${iso.slice(11, 13)}h` : iso.slice(5, 10);
  }

  // A line plot in SVG: one polyline per series over the buckets, gaps where a value is null.
  function linePlot({ id, title, starts, bucket, series, format, max }) {
    const W = 560;
    const H = 200;
    const left = 48;
    const right = 10;
    const top = 10;
    const bottom = 28;
    const n = starts.length;
    const values = series.flatMap((s) => s.values.filter((v) => v !== null && v !== undefined));
    const yMax = max ?? niceMax(Math.max(0, ...values));
    const x = (i) => left + (n <= 1 ? (W - left - right) / 2 : (i / (n - 1)) * (W - left - right));
    const y = (v) => top + (1 - v / yMax) * (H - top - bottom);
    const grid = [0, 0.25, 0.5, 0.75, 1]
      .map((f) => `<line class="grid-line" x1="${left}" x2="${W - right}" y1="${y(f * yMax)}" y2="${y(f * yMax)}"></line>
        <text class="axis" x="${left - 4}" y="${y(f * yMax) + 4}" text-anchor="end">${esc(format(f * yMax))}</text>`)
      .join("");
    const ticks = [];
    const every = Math.max(1, Math.ceil(n / 6));
    for (let i = 0; i < n; i += every) {
      ticks.push(`<text class="axis" x="${x(i)}" y="${H - 8}" text-anchor="middle">${esc(tickLabel(starts[i], bucket))}</text>`);
    }
    const lines = series
      .map((s, k) => {
        const color = s.color || COLORS[k % COLORS.length];
        const runs = [];
        let run = [];
        s.values.forEach((v, i) => {
          if (v === null || v === undefined) {
            if (run.length) runs.push(run);
            run = [];
          } else run.push(`${x(i).toFixed(1)},${y(v).toFixed(1)}`);
        });
        if (run.length) runs.push(run);
        // Every value is a dot (a lone bucket with calls shows too); neighbours are joined.
        const dots = runs
          .flat()
          .map((p) => `<circle class="series" cx="${p.split(",")[0]}" cy="${p.split(",")[1]}" r="${n > 60 ? 1.6 : 2.6}" fill="${color}"></circle>`)
          .join("");
        const paths = runs
          .filter((r) => r.length > 1)
          .map((r) => `<polyline class="series" points="${r.join(" ")}" stroke="${color}" ${s.dash ? 'stroke-dasharray="4 3"' : ""}></polyline>`)
          .join("");
        return paths + dots;
      })
      .join("");
    const legend = series
      .map((s, k) => `<span><i style="background:${s.color || COLORS[k % COLORS.length]}${s.dash ? ";opacity:.6" : ""}"></i>${esc(s.name)}</span>`)
      .join("");
    return `<figure class="plot" id="${id}"><figcaption>${esc(title)}</figcaption>
      <svg viewBox="0 0 ${W} ${H}" role="img" aria-label="${esc(title)}">${grid}${ticks.join("")}${lines}</svg>
      <div class="legend">${legend}</div></figure>`;
  }

  function plots(rows, bucket) {
    const starts = rows.map((r) => new Date(r.start));
    const pick = (f) => rows.map(f);
    const rate = (f) => rows.map((r) => (r.contextCalls ? f(r) : null));
    const phase = (name, key) => rows.map((r) => (r.latency.find((p) => p.phase === name) || {})[key] ?? null);
    const count = (v) => String(Number(v.toFixed(2)));
    const percent = (v) => `${Math.round(v * 100)}%`;
    const millis = (v) => (v >= 10 ? `${Math.round(v)}` : String(Number(v.toFixed(2))));
    return [
      linePlot({
        id: "plot-calls",
        title: "Context calls",
        starts,
        bucket,
        format: count,
        series: [
          { name: "calls", values: pick((r) => r.contextCalls) },
          { name: "degraded", values: pick((r) => r.degradedCalls) },
          { name: "empty", values: pick((r) => r.emptyCalls) },
        ],
      }),
      linePlot({
        id: "plot-rates",
        title: "Injection and empty-packet rate",
        starts,
        bucket,
        format: percent,
        max: 1,
        series: [
          { name: "injection rate", values: rate((r) => r.injectionRate) },
          { name: "empty-packet rate", values: rate((r) => r.emptyRate) },
        ],
      }),
      linePlot({
        id: "plot-blocked",
        title: "Blocked and gated decisions",
        starts,
        bucket,
        format: count,
        series: [
          { name: "blocked (conflict, volatility)", values: pick((r) => r.blockedDecisions) },
          { name: "gated (below relevance floor)", values: pick((r) => r.gatedDecisions) },
          { name: "calls emptied by the gate", values: pick((r) => r.noRelevantMemoryCalls) },
        ],
      }),
      linePlot({
        id: "plot-p50",
        title: "Latency p50 by phase (ms)",
        starts,
        bucket,
        format: millis,
        series: PHASES.map((p) => ({ name: p.toLowerCase(), values: phase(p, "p50Ms") })),
      }),
      linePlot({
        id: "plot-p95",
        title: "Latency p95 by phase (ms)",
        starts,
        bucket,
        format: millis,
        series: PHASES.map((p) => ({ name: p.toLowerCase(), values: phase(p, "p95Ms") })),
      }),
    ].join("");
  }

  function statsView(_arg, args) {
    let stopped = false;
    const windowName = WINDOWS[args.window] ? args.window : "day";
    const win = WINDOWS[windowName];
    view().innerHTML = `
      <section class="stats-view">
        <h1>Stats over time</h1>
        <p class="filters">Window
          ${Object.entries(WINDOWS)
            .map(([w, d]) => `<a class="chip ${w === windowName ? "active" : ""}" href="${hashFor("stats", { window: w })}">${esc(d.label)}</a>`)
            .join(" ")}
        </p>
        <div id="tiles" class="tiles"><p class="muted">Loading…</p></div>
        <div id="plots" class="plots"><p class="muted">Loading…</p></div>
      </section>`;
    const since = new Date(Date.now() - win.ms).toISOString();
    gql(STATS, { since })
      .then((data) => {
        if (stopped) return;
        const s = data.stats;
        $("#tiles").innerHTML = [
          tile("Context calls", s.contextCalls),
          tile("Injection rate", pct(s.injectionRate), "calls that served a fact"),
          tile("Empty calls", s.emptyCalls, `${s.noRelevantMemoryCalls} emptied by the recall gate`),
          tile("Degraded calls", s.degradedCalls),
          tile("Latency p50 / p95", `${ms(s.latencyP50Ms) || "–"} / ${ms(s.latencyP95Ms) || "–"}`),
          tile("Facts / tokens per call", `${s.avgFactsServed.toFixed(1)} / ${Math.round(s.avgUsedTokens)}`),
          tile("Active facts", s.activeFacts, "now"),
          tile("Open conflicts", s.openConflicts, s.oldestOpenConflictSeconds !== null ? `oldest open for ${age(s.oldestOpenConflictSeconds)}` : "now"),
        ].join("");
        const reasons = s.reasonCodes.map((r) => `${r.reasonCode.toLowerCase().replace(/_/g, " ")} ${r.count}`).join(" · ");
        $("#tiles").insertAdjacentHTML("beforeend", `<p class="muted small reasons">Decisions: ${esc(reasons || "none")}</p>`);
      })
      .catch(showError);
    gql(SERIES, { since, bucket: win.bucket })
      .then((data) => {
        if (!stopped) $("#plots").innerHTML = plots(data.statsSeries, win.bucket);
      })
      .catch((err) => {
        $("#plots").innerHTML = `<p class="muted">No plots: ${esc(err.message)}</p>`;
      });
    return {
      stop() {
        stopped = true;
      },
    };
  }

  // ---------------------------------------------------------------- start

  window.addEventListener("hashchange", route);
  document.addEventListener("DOMContentLoaded", () => {
    setupKeyForm();
    route();
  });

  // For the plots module and tests: the API client and helpers.
  window.haki = { gql, esc, ms, pct, when, hashFor };
})();
