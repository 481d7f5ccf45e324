// contextfold's console: pages over the same RPCs the clients call (POST /api/<Service>/<Method>, proto3 JSON).
// Every value reaches the page as text (textContent, never markup): memory content is user-derived.
// The API key is kept in this tab's session storage and sent as a header; the console sets no cookie.
"use strict";

const KEY = "contextfold.key";
const state = { me: null, readAfter: "", route: 0 };

// ---- Building pages, as text only ------------------------------------------------------------------------------

function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (name === "dataset") Object.assign(node.dataset, value);
    else if (name in node && typeof value !== "string") node[name] = value;
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function table(id, headings, rows) {
  return el(
    "table",
    { id },
    el("thead", {}, el("tr", {}, headings.map((heading) => el("th", {}, heading)))),
    el("tbody", {}, rows),
  );
}

function field(label, input, wide = false) {
  return el("label", { class: wide ? "wide" : undefined }, label, input);
}

function render(nodes) {
  document.getElementById("page").replaceChildren(...[nodes].flat(2));
}

function failure(error) {
  const violations = (error.fieldViolations || []).map((v) => el("li", {}, el("code", {}, v.field), `: ${v.description}`));
  return el(
    "div",
    { class: "error", role: "alert" },
    el("strong", {}, error.code || "ERROR"),
    error.reason ? ` (${error.reason})` : "",
    `: ${error.message || ""}`,
    violations.length ? el("ul", {}, violations) : null,
  );
}

function seconds(duration) {
  return duration ? Number.parseFloat(String(duration).replace(/s$/, "")) : 0;
}

function when(timestamp) {
  return timestamp ? new Date(timestamp).toLocaleString() : "";
}

function number(value, digits = 3) {
  return typeof value === "number" ? value.toFixed(digits) : "";
}

function shortName(enumName, prefix) {
  return enumName ? enumName.replace(prefix, "").toLowerCase().replaceAll("_", " ") : "";
}

// ---- Calls -------------------------------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(body) {
    super(body.message || body.code);
    Object.assign(this, body);
  }
}

async function api(method, body = {}) {
  const headers = { "content-type": "application/json" };
  const key = sessionStorage.getItem(KEY);
  if (key) headers.authorization = `Bearer ${key}`;
  if (state.readAfter) headers["x-contextfold-read-after"] = state.readAfter;
  let response;
  try {
    response = await fetch(`/api/${method}`, {
      method: "POST",
      headers,
      body: JSON.stringify(body),
      credentials: "omit",
      cache: "no-store",
    });
  } catch (error) {
    throw new ApiError({ code: "UNAVAILABLE", message: `the console's server did not answer (${error.message})` });
  }
  const token = response.headers.get("x-contextfold-read-after");
  if (token) state.readAfter = token;
  const data = await response.json().catch(() => ({ code: "UNKNOWN", message: response.statusText }));
  if (!response.ok) throw new ApiError(data);
  return data;
}

/** Every item of a listing (`items` names its field), page after page. */
async function everyPage(method, items) {
  const all = [];
  let pageToken = "";
  do {
    const page = await api(method, { pageToken });
    all.push(...(page[items] || []));
    pageToken = page.nextPageToken || "";
  } while (pageToken);
  return all;
}

// ---- Filters: the clients' shorthand ({topic: "food", rating: {gte: 3}}) as the protos' Filter --------------------

const TESTS = new Set(["eq", "in", "contains", "gt", "gte", "lt", "lte", "exists"]);
const TIMES = new Set(["create_time", "update_time", "expire_time"]);

function isTests(value) {
  return value !== null && typeof value === "object" && !Array.isArray(value) &&
    Object.keys(value).length > 0 && Object.keys(value).every((key) => TESTS.has(key));
}

function filterPart(key, value) {
  if (key === "all" || key === "any") return { [key]: { filters: value.map(filterMessage) } };
  if (key === "not") return { not: filterMessage(value) };
  const name = TIMES.has(key) || key.startsWith("metadata.") ? key : `metadata.${key}`;
  const tests = isTests(value) ? value : { eq: value };
  const conditions = [];
  const range = {};
  for (const bound of ["gt", "gte", "lt", "lte"]) {
    if (tests[bound] === undefined) continue;
    range[bound] = TIMES.has(name) ? { time: new Date(tests[bound]).toISOString() } : { number: tests[bound] };
  }
  if (Object.keys(range).length) conditions.push({ field: { field: name, range } });
  if ("eq" in tests) conditions.push({ field: { field: name, equals: tests.eq } });
  if (tests.in !== undefined) conditions.push({ field: { field: name, in: tests.in } });
  if (tests.contains !== undefined) conditions.push({ field: { field: name, contains: tests.contains } });
  if (tests.exists !== undefined) conditions.push({ field: { field: name, exists: tests.exists } });
  return conditions.length === 1 ? conditions[0] : { all: { filters: conditions } };
}

function filterMessage(data) {
  if (data === null || typeof data !== "object" || Array.isArray(data)) throw new Error("a filter is a JSON object");
  const parts = Object.entries(data).map(([key, value]) => filterPart(key, value));
  if (!parts.length) throw new Error("an empty filter: give at least one condition");
  return parts.length === 1 ? parts[0] : { all: { filters: parts } };
}

function parsedFilter(text) {
  if (!text.trim()) return undefined;
  let data;
  try {
    data = JSON.parse(text);
  } catch (error) {
    throw new ApiError({ code: "INVALID_ARGUMENT", message: `filter: not JSON (${error.message})` });
  }
  try {
    return filterMessage(data);
  } catch (error) {
    throw new ApiError({ code: "INVALID_ARGUMENT", message: `filter: ${error.message}` });
  }
}

/** The names typed into `input`, comma-separated. */
function names(input) {
  return input.value.split(",").map((name) => name.trim()).filter(Boolean);
}

function scopeFrom(userId, agentId, sessionId) {
  const scope = {};
  if (userId) scope.userId = userId;
  if (agentId) scope.agentId = agentId;
  if (sessionId) scope.sessionId = sessionId;
  return scope;
}

// ---- Sign-in -----------------------------------------------------------------------------------------------------

async function identify() {
  try {
    state.me = await api("whoami");
  } catch (error) {
    state.me = null;
    if (error.code !== "UNAUTHENTICATED") throw error;
  }
  const nav = document.getElementById("nav");
  nav.hidden = !state.me;
  document.getElementById("sign-out").hidden = !state.me || !sessionStorage.getItem(KEY);
  document.getElementById("nav-providers").hidden = !(state.me && state.me.canManage);
  document.getElementById("nav-erase").hidden = !(state.me && state.me.canWrite);
  const me = state.me;
  document.getElementById("whoami").textContent = me
    ? `${me.namespace} · ${me.role}${me.userId ? ` · user ${me.userId}` : ""}${me.agentId ? ` · agent ${me.agentId}` : ""}${me.canWrite ? "" : " · read-only"}`
    : "";
}

function loginPage(error) {
  const key = el("input", { id: "key", type: "password", autocomplete: "off", placeholder: "cfk_…", required: true });
  const submit = async (event) => {
    event.preventDefault();
    sessionStorage.setItem(KEY, key.value.trim());
    try {
      await identify();
    } catch (failed) {
      render(loginPage(failed));
      return;
    }
    if (!state.me) {
      sessionStorage.removeItem(KEY);
      render(loginPage({ code: "UNAUTHENTICATED", message: "the API key is not valid, or it was revoked" }));
      return;
    }
    location.hash = "#/stores";
  };
  return [
    el("h1", {}, "Sign in"),
    el("p", { class: "muted" }, "An API key (contextfold keys create). It is kept in this tab only, until you sign out or close it."),
    error ? failure(error) : null,
    el("form", { id: "login", onsubmit: submit }, field("API key", key), el("button", { id: "sign-in", type: "submit" }, "Sign in")),
  ];
}

// ---- Stores ------------------------------------------------------------------------------------------------------

async function storesPage() {
  const stores = await everyPage("MemoryService/ListStores", "stores");
  const rows = stores.map((store) =>
    el(
      "tr",
      { dataset: { store: store.name } },
      el("td", {}, el("a", { class: "store-link", href: `#/store/${encodeURIComponent(store.name)}` }, store.name)),
      el("td", {}, store.description || ""),
      el("td", { class: "number" }, store.memoryCount || "0"),
      el("td", { class: "number" }, store.dimension || ""),
      el("td", {}, store.defaultTtl ? `${seconds(store.defaultTtl)} s` : "none"),
      el("td", {}, when(store.createTime)),
    ),
  );
  return [
    el("h1", {}, "Stores"),
    stores.length
      ? table("stores", ["Name", "Description", "Entries", "Dimension", "Default TTL", "Created"], rows)
      : el("p", { class: "muted", id: "no-stores" }, "No stores yet."),
  ];
}

// ---- A store's entries, their versions, corrections -------------------------------------------------------------------

async function storePage(name, query = {}) {
  const userId = el("input", { id: "filter-user", value: query.userId || "" });
  const agentId = el("input", { id: "filter-agent", value: query.agentId || "" });
  const sessionId = el("input", { id: "filter-session", value: query.sessionId || "" });
  const filter = el("textarea", { id: "filter-json", placeholder: '{"topic": "food", "rating": {"gte": 3}}' });
  filter.value = query.filter || "";
  const results = el("div", { id: "entries-area" });
  const apply = async (event, pageToken = "") => {
    if (event) event.preventDefault();
    let request;
    try {
      request = {
        store: name,
        pageSize: 50,
        pageToken,
        scope: scopeFrom(userId.value.trim(), agentId.value.trim(), sessionId.value.trim()),
        filter: parsedFilter(filter.value),
      };
      const page = await api("MemoryService/ListMemories", request);
      results.replaceChildren(...entriesTable(page.memories || [], () => apply(null, pageToken)));
      if (page.nextPageToken) {
        results.append(el("button", { class: "secondary", id: "next-page", type: "button", onclick: () => apply(null, page.nextPageToken) }, "Next page"));
      }
    } catch (error) {
      results.replaceChildren(failure(error));
    }
  };
  const nodes = [
    el("h1", {}, "Store ", el("code", { id: "store-name" }, name)),
    el(
      "form",
      { id: "entry-filters", onsubmit: apply },
      field("user_id", userId),
      field("agent_id", agentId),
      field("session_id", sessionId),
      field("filter (metadata and times, as the clients write it)", filter, true),
      el("button", { id: "apply-filters", type: "submit" }, "Show entries"),
    ),
    results,
  ];
  await apply(null);
  return nodes;
}

function entriesTable(memories, reload) {
  if (!memories.length) return [el("p", { class: "muted", id: "no-entries" }, "No entries match.")];
  const rows = memories.map((memory) => {
    const details = el("div", { class: "entry-details" });
    const actions = el(
      "td",
      {},
      el("button", { class: "secondary versions", type: "button", onclick: () => versions(memory, details) }, "Versions"),
      state.me && state.me.canWrite
        ? el("button", { class: "secondary correct", type: "button", onclick: () => correction(memory, details, reload) }, "Correct")
        : null,
    );
    return [
      el(
        "tr",
        { class: "entry", dataset: { id: memory.id } },
        el("td", {}, el("code", {}, memory.id)),
        el("td", { class: "content" }, el("pre", {}, memory.content || "")),
        el("td", {}, [memory.userId, memory.agentId, memory.sessionId].filter(Boolean).join(" / ")),
        el("td", {}, el("pre", {}, memory.metadata ? JSON.stringify(memory.metadata) : "")),
        el("td", {}, when(memory.updateTime)),
        actions,
      ),
      el("tr", { class: "entry-more" }, el("td", { colspan: 6 }, details)),
    ];
  });
  return [table("entries", ["Id", "Content", "Scope", "Metadata", "Updated", ""], rows.flat())];
}

async function versions(memory, into) {
  try {
    const page = await api("MemoryService/ListMemoryVersions", { id: memory.id, pageSize: 100 });
    const items = (page.versions || []).map((version) =>
      el(
        "li",
        { class: "version", dataset: { version: version.version } },
        el("strong", {}, `version ${version.version}`),
        ` replaced ${when(version.replaceTime)}${version.replacedBy ? ` by key ${version.replacedBy}` : ""}: `,
        el("pre", {}, version.memory ? version.memory.content : ""),
      ),
    );
    into.replaceChildren(
      el(
        "div",
        { class: "versions-list" },
        el("p", {}, el("strong", {}, "current"), ` (etag ${memory.etag}, updated ${when(memory.updateTime)})`),
        items.length ? el("ul", {}, items) : el("p", { class: "muted" }, "No earlier versions: it was never updated."),
      ),
    );
  } catch (error) {
    into.replaceChildren(failure(error));
  }
}

function correction(memory, into, reload) {
  const text = el("textarea", { class: "correction" });
  text.value = memory.content || "";
  const save = async () => {
    try {
      await api("MemoryService/UpdateMemory", {
        memory: { id: memory.id, content: text.value, etag: memory.etag },
        updateMask: "content",
      });
      await reload();
    } catch (error) {
      into.append(failure(error));
    }
  };
  into.replaceChildren(
    el("div", { class: "panel" }, field("new content (embedded again when saved)", text, true), el("button", { class: "save", type: "button", onclick: save }, "Save correction")),
  );
}

// ---- Playground: Inject with the report explained ------------------------------------------------------------------

function conversation(text) {
  const messages = [];
  for (const line of text.split("\n")) {
    const match = /^\s*(user|assistant)\s*:\s?(.*)$/i.exec(line);
    if (match) messages.push({ role: `ROLE_${match[1].toUpperCase()}`, content: [{ text: match[2] }] });
    else if (messages.length) messages[messages.length - 1].content[0].text += `\n${line}`;
    else if (line.trim()) messages.push({ role: "ROLE_USER", content: [{ text: line }] });
  }
  return messages;
}

// The report's total counts the separators between blocks and the message they follow; each source's own
// count does not: the difference is said, so the summary and the Sources table agree.
function tokensInjected(report) {
  const total = report.totalTokens || 0;
  const own = (report.sources || []).reduce((sum, source) => sum + (source.injected ? source.tokens || 0 : 0), 0);
  if (!total || total === own) return String(total);
  return `${total} (${own} from the sources, ${total - own} in the separators before them)`;
}

function playgroundPage() {
  const text = el("textarea", { id: "conversation", placeholder: "user: What is my dog called?" });
  const stores = el("input", { id: "stores-input", placeholder: "every store" });
  const maxEntries = el("input", { id: "max-entries", type: "number", min: 0, max: 100, value: "5" });
  const ranking = el(
    "select",
    { id: "ranking" },
    ["", "RANKING_SIMILARITY", "RANKING_STORE_AWARE", "RANKING_HYBRID", "RANKING_RERANK"].map((value) =>
      el("option", { value }, value ? shortName(value, "RANKING_") : "server default"),
    ),
  );
  const format = el(
    "select",
    { id: "format" },
    ["", "FORMAT_XML", "FORMAT_BULLETS", "FORMAT_MARKDOWN"].map((value) => el("option", { value }, value ? shortName(value, "FORMAT_") : "xml (default)")),
  );
  const minScore = el("input", { id: "min-score", type: "number", step: "0.05", min: -1, max: 1, placeholder: "none" });
  const maxTokens = el("input", { id: "max-tokens", type: "number", min: 0, placeholder: "no cap" });
  const userId = el("input", { id: "user-id" });
  const agentId = el("input", { id: "agent-id" });
  const sessionId = el("input", { id: "session-id" });
  const out = el("div", { id: "playground-result" });
  const run = async (event) => {
    event.preventDefault();
    const memory = {
      stores: names(stores),
      maxEntries: Number.parseInt(maxEntries.value || "5", 10),
      scope: scopeFrom(userId.value.trim(), agentId.value.trim(), sessionId.value.trim()),
    };
    if (ranking.value) memory.ranking = ranking.value;
    if (format.value) memory.format = format.value;
    if (minScore.value !== "") memory.minScore = Number.parseFloat(minScore.value);
    const request = { messages: conversation(text.value), memory, explain: true };
    if (maxTokens.value) request.maxTokens = Number.parseInt(maxTokens.value, 10);
    out.replaceChildren(el("p", { class: "muted" }, "Injecting…"));
    try {
      const response = await api("InjectionService/Inject", request);
      out.replaceChildren(...injected(response));
    } catch (error) {
      out.replaceChildren(failure(error));
    }
  };
  return [
    el("h1", {}, "Playground"),
    el("p", { class: "muted" }, "A conversation, one message per line (user: … / assistant: …), injected as an agent's call would be, with the report explained."),
    el(
      "form",
      { id: "playground", onsubmit: run },
      field("conversation", text, true),
      field("stores (comma-separated)", stores),
      field("max entries", maxEntries),
      field("ranking", ranking),
      field("format", format),
      field("min score", minScore),
      field("token budget", maxTokens),
      field("user_id", userId),
      field("agent_id", agentId),
      field("session_id", sessionId),
      el("button", { id: "run", type: "submit" }, "Inject"),
    ),
    out,
  ];
}

function injected(response) {
  const report = response.report || {};
  const messages = (response.messages || []).map((message, index) =>
    el(
      "div",
      { class: "message", dataset: { index } },
      el("div", { class: "role" }, shortName(message.role, "ROLE_")),
      (message.content || []).map((block) => {
        if (block.injected) {
          return el("div", { class: "injected" }, el("div", { class: "muted" }, `injected by ${block.injected.source}`), el("pre", {}, block.injected.text));
        }
        return block.text !== undefined ? el("pre", {}, block.text) : el("pre", { class: "muted" }, JSON.stringify(block));
      }),
    ),
  );
  const summary = el(
    "table",
    { id: "report-summary" },
    el(
      "tbody",
      {},
      [
        ["injected", report.injected ? "yes" : `no: ${shortName(report.skipReason, "SKIP_REASON_")}`],
        ["detail", report.detail || ""],
        ["query", report.query || ""],
        ["ranking", shortName(report.ranking, "RANKING_")],
        ["database", report.database || ""],
        ["tokens injected", tokensInjected(report)],
      ].map(([name, value]) => el("tr", {}, el("th", {}, name), el("td", {}, value))),
    ),
  );
  const order = ["trigger", "query", "embed", "search", "rank", "fold", "total"];
  const stages = Object.entries(report.stageDurations || {})
    .map(([stage, duration]) => [stage, seconds(duration)])
    .sort(([a], [b]) => (order.indexOf(a) + 1 || 99) - (order.indexOf(b) + 1 || 99));
  const total = Math.max(...stages.map(([, s]) => s), 1e-9);
  const bars = el(
    "div",
    { class: "bars", id: "stages" },
    stages.flatMap(([stage, s]) => {
      const bar = el("div", { class: "bar", dataset: { stage } });
      bar.style.width = `${(100 * s) / total}%`;
      return [el("span", {}, stage), el("div", {}, bar), el("span", { class: "mono" }, `${(s * 1000).toFixed(2)} ms`)];
    }),
  );
  const candidates = (report.candidates || []).map((candidate) => {
    const verdict = shortName(candidate.verdict, "CANDIDATE_VERDICT_") || "undecided";
    return el(
      "tr",
      { class: "candidate", dataset: { id: candidate.id, verdict } },
      el("td", { class: "number" }, candidate.rank || "–"),
      el("td", {}, el("code", {}, candidate.id), el("div", { class: "muted" }, candidate.store || "")),
      el("td", {}, el("pre", {}, candidate.content || "")),
      el("td", { class: "number similarity" }, number(candidate.similarity ?? 0)),
      el(
        "td",
        { class: "signals" },
        Object.entries(candidate.signals || {}).map(([name, value]) => el("span", {}, `${name.replaceAll("_", " ")} ${value >= 0 ? "+" : ""}${number(value)}`)),
      ),
      el("td", { class: "number score" }, number(candidate.score ?? 0)),
      el("td", {}, el("span", { class: `verdict ${verdict === "injected" ? "injected" : "left-out"}` }, verdict), el("div", { class: "muted" }, candidate.detail || "")),
    );
  });
  const sources = (report.sources || []).map((source) =>
    el(
      "tr",
      { class: "source", dataset: { source: source.source } },
      el("td", {}, source.source),
      el("td", {}, source.injected ? "injected" : shortName(source.skipReason, "SKIP_REASON_")),
      el("td", {}, source.detail || ""),
      el("td", { class: "number" }, String(source.tokens || 0)),
      el("td", { class: "number" }, `${(seconds(source.duration) * 1000).toFixed(2)} ms`),
    ),
  );
  return [
    el("h2", {}, "Folded messages"),
    el("div", { id: "folded" }, messages),
    el("h2", {}, "Report"),
    summary,
    el("h2", {}, "Stages"),
    bars,
    el("h2", {}, "Candidates: why each entry was injected or left out"),
    candidates.length
      ? table("candidates", ["Rank", "Entry", "Content", "Similarity", "Signals", "Score", "Verdict"], candidates)
      : el("p", { class: "muted", id: "no-candidates" }, "Memory weighed no candidates (see the report)."),
    el("h2", {}, "Sources"),
    table("sources", ["Source", "Outcome", "Detail", "Tokens", "Time"], sources),
  ];
}

// ---- Providers ---------------------------------------------------------------------------------------------------

async function providersPage() {
  const providers = await everyPage("ProviderService/ListProviders", "providers");
  const rows = providers.map((provider) =>
    el(
      "tr",
      { class: "provider", dataset: { name: provider.name } },
      el("td", {}, provider.name),
      el("td", {}, el("code", {}, provider.target)),
      el("td", {}, provider.triggerExpression ? el("code", {}, provider.triggerExpression) : shortName(provider.trigger, "TRIGGER_")),
      el("td", { class: "number" }, String(provider.priority || 0)),
      el("td", { class: "number" }, `${seconds(provider.timeout) * 1000} ms`),
      el("td", {}, provider.enabled === false ? "disabled" : "enabled"),
      el(
        "td",
        { class: "outcomes" },
        (provider.outcomes || []).length
          ? el(
              "ul",
              {},
              provider.outcomes.map((outcome) =>
                el(
                  "li",
                  { class: "outcome" },
                  el("strong", {}, outcome.injected ? "injected" : shortName(outcome.skipReason, "SKIP_REASON_")),
                  `: ${outcome.count} ${outcome.count === "1" ? "call" : "calls"}, the last ${when(outcome.lastTime)}`,
                  outcome.lastDetail ? el("div", { class: "muted" }, outcome.lastDetail) : null,
                ),
              ),
            )
          : el("span", { class: "muted" }, "not asked yet"),
      ),
    ),
  );
  return [
    el("h1", {}, "Providers"),
    el("p", { class: "muted" }, "Outcomes are gathered from every worker every two seconds. ", el("button", { id: "refresh", class: "secondary", type: "button", onclick: route }, "Refresh")),
    providers.length
      ? table("providers", ["Name", "Target", "Trigger", "Priority", "Timeout", "State", "Recent outcomes"], rows)
      : el("p", { class: "muted", id: "no-providers" }, "No providers registered."),
  ];
}

// ---- Erasure by scope, counted first --------------------------------------------------------------------------------

function erasePage() {
  const userId = el("input", { id: "erase-user" });
  const agentId = el("input", { id: "erase-agent" });
  const sessionId = el("input", { id: "erase-session" });
  const stores = el("input", { id: "erase-stores", placeholder: "every store" });
  const out = el("div", { id: "erase-area" });
  const request = () => ({
    scope: scopeFrom(userId.value.trim(), agentId.value.trim(), sessionId.value.trim()),
    stores: names(stores),
  });
  const count = async (event) => {
    event.preventDefault();
    const asked = request();
    try {
      const counted = await api("MemoryService/EraseMemories", { ...asked, validateOnly: true });
      const n = Number(counted.erasedCount || 0);
      const confirm = el("input", { id: "erase-confirm", type: "checkbox" });
      const erase = el("button", { id: "erase-button", class: "danger", type: "button", disabled: true }, `Erase ${n} entries`);
      confirm.disabled = n === 0;
      confirm.addEventListener("change", () => {
        erase.disabled = !confirm.checked;
      });
      erase.addEventListener("click", async () => {
        erase.disabled = true;
        try {
          const done = await api("MemoryService/EraseMemories", asked);
          out.replaceChildren(el("p", { class: "notice", id: "erase-result" }, `Erased ${Number(done.erasedCount || 0)} entries, with their versions.`));
        } catch (error) {
          out.append(failure(error));
        }
      });
      out.replaceChildren(
        el("p", { class: "notice" }, el("strong", { id: "erase-count" }, String(n)), ` entries would be erased (${describeScope(asked)}), with their versions. This cannot be undone.`),
        el("label", { class: "inline" }, confirm, `I want to erase these ${n} entries`),
        erase,
      );
    } catch (error) {
      out.replaceChildren(failure(error));
    }
  };
  return [
    el("h1", {}, "Erase"),
    el("p", { class: "muted" }, "Every entry of a user, an agent or a session (an erasure request): counted first, erased once you confirm."),
    el(
      "form",
      { id: "erase-form", onsubmit: count },
      field("user_id", userId),
      field("agent_id", agentId),
      field("session_id", sessionId),
      field("stores (comma-separated)", stores),
      el("button", { id: "erase-count-button", type: "submit" }, "Count entries"),
    ),
    out,
  ];
}

function describeScope(asked) {
  const parts = Object.entries(asked.scope).map(([name, value]) => `${name.replace("Id", "_id")} ${value}`);
  return `${parts.join(", ") || "no scope"}${asked.stores.length ? ` in ${asked.stores.join(", ")}` : " in every store"}`;
}

// ---- Routing -----------------------------------------------------------------------------------------------------

const PAGES = {
  login: () => loginPage(),
  store: (rest) => storePage(decodeURIComponent(rest.join("/"))),
  playground: () => playgroundPage(),
  providers: () => providersPage(),
  erase: () => erasePage(),
  stores: () => storesPage(),
};

async function route() {
  const [, name, ...rest] = (location.hash || "#/stores").split("/");
  const mine = ++state.route;
  for (const link of document.querySelectorAll("nav a")) link.classList.toggle("current", link.getAttribute("href") === `#/${name}`);
  if (!state.me && name !== "login") {
    location.hash = "#/login";
    return;
  }
  let nodes;
  try {
    nodes = await (PAGES[name] || PAGES.stores)(rest);
  } catch (error) {
    nodes = [failure(error)];
  }
  // A page still loading when another was asked for is dropped, not shown over it.
  if (mine === state.route) render(nodes);
}

async function start() {
  document.getElementById("sign-out").addEventListener("click", () => {
    sessionStorage.removeItem(KEY);
    state.me = null;
    location.hash = "#/login";
    identify().then(route, (error) => render(failure(error)));
  });
  try {
    await identify();
  } catch (error) {
    render(failure(error));
    return;
  }
  window.addEventListener("hashchange", route);
  if (state.me && (location.hash === "" || location.hash === "#/login")) location.hash = "#/stores";
  await route();
}

start();
