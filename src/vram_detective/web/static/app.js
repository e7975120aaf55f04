// vram-detective's page script: keeps the whole state in the URL, recomputes through the server (which
// renders the charts), copies launch lines. No libraries; nothing is fetched from outside this server.
"use strict";
(function () {
  const $ = (sel, root) => (root || document).querySelector(sel);
  const $$ = (sel, root) => Array.from((root || document).querySelectorAll(sel));
  const status = (text) => { $("#status").textContent = text; };
  let baseline = null;
  let baselineSetup = null;  // the setup (model, GPU, release...) the baseline was taken on
  let timer = null;
  let pending = null;

  function state() {
    const out = new URLSearchParams();
    for (const el of $$("#setup [name]")) if (el.value.trim()) out.set(el.name, el.value.trim());
    for (const el of $$("#levers [name]")) {
      if (el.dataset.set !== "1") continue;
      if (el.type === "checkbox") out.set(el.name, el.checked ? "true" : "false");
      else if (el.dataset.value !== undefined) out.set(el.name, el.dataset.value);  // the URL's value, unsnapped
      else if (el.value !== "") out.set(el.name, el.value);
    }
    for (const el of $$("#fit-form [name]")) if (el.value.trim()) out.set(el.name, el.value.trim());
    const tab = $('[role="tab"][aria-selected="true"]').id.slice(4);
    if (tab === "simulate") {
      out.set("workload", workloadSpec());
      const seed = $("#f-seed").value.trim();
      if (seed && seed !== "0") out.set("seed", seed);
    }
    if (tab !== "explain") out.set("tab", tab);
    const theme = document.documentElement.dataset.theme;
    if (theme) out.set("theme", theme);
    return out;
  }

  function setupKey() {
    return $$("#setup [name]").map((el) => el.name + "=" + el.value.trim()).join("&");
  }

  function takeBaseline() { baseline = figures(); baselineSetup = setupKey(); }

  function remember() { history.replaceState(null, "", "?" + state().toString()); }

  function figures() {
    const out = {};
    for (const dd of $$("#explain-result [data-figure]")) out[dd.dataset.figure] = JSON.parse(dd.dataset.value);
    return out;
  }

  function showDelta() {
    const now = figures();
    const line = $("#explain-result .delta");
    if (!line || !baseline) return;
    const parts = [];
    const names = { nvidia_smi_used_mib: ["nvidia-smi", " MiB"], kv_cache_tokens: ["KV tokens", ""],
                    max_concurrency: ["concurrency", "x"] };
    for (const [key, [label, unit]] of Object.entries(names)) {
      if (typeof now[key] !== "number" || typeof baseline[key] !== "number") continue;
      const d = now[key] - baseline[key];
      if (Math.abs(d) < 1e-9) continue;
      const text = Number.isInteger(d) ? d.toLocaleString("en") : d.toFixed(2);
      parts.push(`${label} ${d > 0 ? "+" : ""}${text}${unit}`);
    }
    line.textContent = parts.length ? "vs the page's first state: " + parts.join(", ") : "";
  }

  async function fetchInto(url, target, options) {
    if (pending) pending.abort();
    pending = new AbortController();
    try {
      const response = await fetch(url, Object.assign({ signal: pending.signal }, options || {}));
      const text = await response.text();
      target.innerHTML = response.ok ? text : `<p class="error" role="alert">${escapeText(errorText(response, text))}</p>`;
      status(response.ok ? "updated" : "error");
      return response.ok;
    } catch (error) {
      if (error.name !== "AbortError") target.innerHTML = `<p class="error" role="alert">${escapeText(String(error))}</p>`;
      return false;
    }
  }

  function errorText(response, text) {
    try { return JSON.parse(text).error; } catch (e) { return `${response.status}: ${text.slice(0, 300)}`; }
  }

  function escapeText(text) {
    const div = document.createElement("div");
    div.textContent = text;
    return div.innerHTML;
  }

  function showResolved() {  // the controls not set by hand show what the release picked
    const holder = $("#resolved");
    if (!holder) return;
    const resolved = JSON.parse(holder.dataset.settings);
    for (const el of $$("#levers [name]")) {
      if (el.dataset.set === "1" || !(el.name in resolved)) continue;
      const value = resolved[el.name];
      if (el.type === "checkbox") el.checked = value === true;
      else {
        if (el.tagName === "SELECT" && !Array.from(el.options).some((o) => o.value === String(value))) {
          el.add(new Option(String(value), String(value)));
        }
        el.value = String(value);
      }
      const out = $("#o-" + el.name);
      if (out) out.textContent = el.value;
    }
  }

  async function recompute() {
    remember();
    const given = (id) => ((($("#" + id) || {}).value) || "").trim();
    if (!(given("f-model") || given("f-line")) || !(given("f-gpu") || given("f-gpu_memory"))) {
      status("pick a model and a GPU");  // nothing to ask the server yet (a half-filled form is not an error)
      return;
    }
    const ok = await fetchInto("/fragment/explain?" + state().toString(), $("#explain-result"));
    if (ok) showResolved();
    if (ok && !baseline) takeBaseline();
    showDelta();
    document.body.dataset.updated = String(Date.now());
  }

  function soon(delay) {
    clearTimeout(timer);
    timer = setTimeout(recompute, delay === undefined ? 120 : delay);
  }

  function onLever(event) {
    const el = event.target;
    if (!el.name) return;
    if (el.type === "text" && event.type === "input") return;  // a typed value is asked for when it is complete
    el.dataset.set = "1";
    delete el.dataset.value;  // moved by hand: its own value from now on
    const out = $("#o-" + el.name);
    if (out) out.textContent = el.value;
    soon();
  }

  function selectTab(tab) {
    for (const t of $$('[role="tab"]')) {
      const on = t === tab;
      t.setAttribute("aria-selected", String(on));
      t.tabIndex = on ? 0 : -1;
      $("#" + t.getAttribute("aria-controls")).hidden = !on;
    }
    remember();
    if (tab.id === "tab-explain" && !$("#explain-result [data-figure]")) soon(0);
  }

  function onTabKey(event) {
    const tabs = $$('[role="tab"]');
    const index = tabs.indexOf(event.target);
    const step = { ArrowRight: 1, ArrowLeft: -1 }[event.key];
    if (step === undefined || index < 0) return;
    const next = tabs[(index + step + tabs.length) % tabs.length];
    next.focus();
    selectTab(next);
    event.preventDefault();
  }

  async function copy(button) {
    const text = button.dataset.copy;
    try { await navigator.clipboard.writeText(text); } catch (e) {
      const area = document.createElement("textarea");
      area.value = text; document.body.appendChild(area); area.select();
      document.execCommand("copy"); area.remove();
    }
    button.textContent = "copied"; status("launch line copied");
    setTimeout(() => { button.textContent = "copy"; }, 1500);
  }

  async function analyse() {
    const body = { log: $("#f-log").value, nvidia_smi: $("#f-nvidia_smi").value };
    for (const name of ["model", "gpu", "version"]) { const v = $("#f-" + name).value.trim(); if (v) body[name] = v; }
    status("analysing the log");
    await fetchInto("/fragment/logs", $("#logs-result"), { method: "POST", body: JSON.stringify(body),
      headers: { "Content-Type": "application/json" } });
  }

  async function find() {
    remember();
    status("searching");
    await fetchInto("/fragment/fit?" + state().toString(), $("#fit-result"));
  }

  function workloadSpec() {  // the simulate command's --workload SPEC from the picker ("trace": a pasted one)
    const shape = $("#f-sim_shape").value;
    if (shape === "trace") return "trace";
    const options = [];
    const users = $("#f-sim_users").value.trim();
    const rate = $("#f-sim_rate").value.trim();
    if (users && users !== "0") options.push("users=" + users);
    else if (rate) options.push("rate=" + rate);
    const duration = $("#f-sim_duration").value.trim();
    if (duration) options.push("duration=" + duration);
    return options.length ? shape + ":" + options.join(",") : shape;
  }

  async function simulate() {
    remember();
    status("simulating");
    const trace = $("#f-sim_shape").value === "trace" ? $("#f-trace").value : "";
    const options = trace ? { method: "POST", body: JSON.stringify({ trace: trace }),
      headers: { "Content-Type": "application/json" } } : undefined;
    const ok = await fetchInto("/fragment/simulate?" + state().toString(), $("#simulate-result"), options);
    if (ok) document.body.dataset.simulated = String(Date.now());
  }

  function onShape() {  // a built-in shape comes with arrivals the page's caps allow (service.WORKLOAD_PRESETS)
    const pick = $("#f-sim_shape");
    $("#trace-field").hidden = pick.value !== "trace";
    const preset = JSON.parse(pick.dataset.presets || "{}")[pick.value];
    if (preset) {
      const given = Object.fromEntries(preset.split(",").map((item) => item.split("=")));
      for (const key of ["rate", "duration", "users"]) $("#f-sim_" + key).value = given[key] || "";
    }
    remember();
  }

  function toggleTheme() {
    const root = document.documentElement;
    const dark = root.dataset.theme ? root.dataset.theme === "dark"
      : window.matchMedia("(prefers-color-scheme: dark)").matches;
    root.dataset.theme = dark ? "light" : "dark";
    remember();
  }

  function start() {
    document.addEventListener("submit", (event) => event.preventDefault());  // Enter recomputes, never reloads
    $("#levers").addEventListener("input", onLever);
    $("#levers").addEventListener("change", onLever);
    $("#setup").addEventListener("change", (event) => {
      if (event.target.name === "engine") {  // other engines have other levers: render the page anew
        const next = state(); next.delete("version");
        for (const el of $$("#levers [name]")) next.delete(el.name);
        location.search = next.toString();
        return;
      }
      // a field left without a new value (a blur after typing the same text) keeps the comparison
      if (setupKey() !== baselineSetup) baseline = null;
      soon(0);
    });
    $("#reset-levers").addEventListener("click", () => {
      for (const el of $$("#levers [name]")) { delete el.dataset.set; delete el.dataset.value; }
      location.search = state().toString();  // the sliders go back to the release's own values
    });
    for (const t of $$('[role="tab"]')) { t.addEventListener("click", () => selectTab(t)); t.addEventListener("keydown", onTabKey); }
    document.addEventListener("click", (event) => { const b = event.target.closest(".copy"); if (b) copy(b); });
    $("#analyse").addEventListener("click", analyse);
    $("#find").addEventListener("click", find);
    $("#simulate").addEventListener("click", simulate);
    $("#f-sim_shape").addEventListener("change", onShape);
    $("#sim-form").addEventListener("change", (event) => { if (event.target.id !== "f-trace") remember(); });
    $("#theme").addEventListener("click", toggleTheme);
    if ($("#explain-result [data-figure]")) takeBaseline();
    const params = new URLSearchParams(location.search);
    if (params.get("tab") === "fit" && params.get("model")) find();
    if (params.get("tab") === "simulate" && params.get("model") && params.get("workload") !== "trace") simulate();
    document.body.dataset.ready = "1";
  }

  start();
})();
