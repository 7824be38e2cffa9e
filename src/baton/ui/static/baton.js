// Baton's status page: fetch the server-rendered fragments of the view in the address (#view?query),
// swap them in, do it again every couple of seconds. A token, when the server wants one, lives in
// this tab's sessionStorage and goes out as an Authorization header; no cookie is ever used.
"use strict";
(function () {
  const body = document.body;
  const POLL_MS = Number(body.dataset.pollMs) || 2000;
  const AUTH = body.dataset.auth === "on";
  const KEY = "baton.token";
  // Each view: its fragments (slot -> address built from the page's query, or null for none).
  const VIEWS = {
    overview: { overview: (p) => "/ui/fragments/overview" + query(p, ["after", "before", "q", "limit"]) },
    schedulers: {
      schedulers: (p) =>
        "/ui/fragments/schedulers" + query(p, ["after", "before", "q", "organisation", "problems", "limit"]),
    },
    control: { control: () => "/ui/fragments/control-plane" },
    tasks: {
      tasks: (p) => "/ui/fragments/tasks" + query(p, ["organisation", "type", "status", "q", "before", "task"]),
      task: (p) => (p.get("task") ? "/ui/fragments/tasks/" + encodeURIComponent(p.get("task")) : null),
    },
  };
  const $ = (selector) => document.querySelector(selector);
  const login = $("#login");
  const filters = $("#task-filters");
  const main = $("main");
  const shown = new Map();
  let timer = 0;
  let generation = 0;
  let session = null;

  class NeedToken extends Error {}

  function query(params, names) {
    const out = new URLSearchParams();
    for (const name of names) if (params.get(name)) out.set(name, params.get(name));
    const text = out.toString();
    return text ? "?" + text : "";
  }

  function route() {
    const raw = location.hash.replace(/^#\/?/, "");
    const cut = raw.indexOf("?");
    const name = cut < 0 ? raw : raw.slice(0, cut);
    return {
      name: Object.hasOwn(VIEWS, name) ? name : "overview",
      params: new URLSearchParams(cut < 0 ? "" : raw.slice(cut + 1)),
    };
  }

  function escapeHtml(text) {
    return String(text).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
  }

  async function reason(response) {
    try {
      const answer = await response.json();
      return answer.message || JSON.stringify(answer.detail);
    } catch (error) {
      return response.status + " " + response.statusText;
    }
  }

  async function call(method, url, json) {
    const headers = {};
    const token = sessionStorage.getItem(KEY);
    if (token) headers.Authorization = "Bearer " + token;
    const init = { method, headers, credentials: "omit", cache: "no-store" };
    if (json !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(json);
    }
    const response = await fetch(url, init);
    if (response.status === 401) throw new NeedToken(await reason(response));
    return response;
  }

  function flash(text, kind) {
    const box = $("#flash");
    box.textContent = text;
    box.className = kind;
    box.hidden = false;
    clearTimeout(flash.timer);
    flash.timer = setTimeout(() => { box.hidden = true; }, 6000);
  }

  // -- the token -----------------------------------------------------------------------------------

  function askForToken(problem) {
    clearTimeout(timer);
    session = null;
    main.hidden = true;
    login.hidden = false;
    $("#login-error").textContent = problem || "";
    $("#forget").hidden = true;
    $("#who").textContent = "";
    login.elements.token.focus();
  }

  async function loadSession() {
    const response = await call("GET", "/ui/api/session");
    if (!response.ok) throw new Error(await reason(response));
    session = await response.json();
    $("#who").textContent = session.token
      ? "token " + session.token + " (" + session.scopes.join(", ") + ")"
      : "authentication off";
    $("#forget").hidden = !session.token;
    body.dataset.scopes = session.scopes.join(" ");
    login.hidden = true;
    main.hidden = false;
  }

  async function start() {
    if (AUTH && !sessionStorage.getItem(KEY)) return askForToken("");
    try {
      await loadSession();
    } catch (error) {
      if (AUTH) sessionStorage.removeItem(KEY);
      return askForToken(error instanceof NeedToken ? "" : error.message);
    }
    syncFilters();
    tick();
  }

  login.addEventListener("submit", async (event) => {
    event.preventDefault();
    sessionStorage.setItem(KEY, login.elements.token.value.trim());
    login.elements.token.value = "";
    try {
      await loadSession();
    } catch (error) {
      sessionStorage.removeItem(KEY);
      return askForToken(error.message);
    }
    syncFilters();
    tick();
  });

  $("#forget").addEventListener("click", () => {
    sessionStorage.removeItem(KEY);
    askForToken("");
  });

  // -- refreshing ----------------------------------------------------------------------------------

  function swap(element, html) {
    if (shown.get(element) === html) return;
    // Someone is typing in this fragment (a new priority): leave it alone until they are done.
    if (element.contains(document.activeElement) && document.activeElement.matches("input, select")) return;
    element.innerHTML = html;
    shown.set(element, html);
  }

  async function refresh() {
    const mine = ++generation;
    const { name, params } = route();
    for (const section of document.querySelectorAll("section[data-view]")) section.hidden = section.dataset.view !== name;
    for (const link of document.querySelectorAll("nav a")) {
      if (link.dataset.nav === name) link.setAttribute("aria-current", "page");
      else link.removeAttribute("aria-current");
    }
    const section = document.querySelector(`section[data-view="${name}"]`);
    await Promise.all(
      Object.entries(VIEWS[name]).map(async ([slot, address]) => {
        const element = section.querySelector(`[data-fragment="${slot}"]`);
        const url = address(params);
        let html = "";
        if (url) {
          const response = await call("GET", url);
          html = response.ok ? await response.text() : `<p class="error">${escapeHtml(await reason(response))}</p>`;
        }
        if (mine === generation) swap(element, html);
      }),
    );
    if (mine === generation) {
      const updated = $("#updated");
      updated.textContent = "updated " + new Date().toLocaleTimeString();
      updated.className = "";
      body.dataset.refreshed = String(Date.now());
    }
  }

  async function tick() {
    clearTimeout(timer);
    if (!session) return;
    if (!document.hidden) {
      try {
        await refresh();
      } catch (error) {
        if (error instanceof NeedToken) return askForToken(error.message);
        const updated = $("#updated");
        updated.textContent = "cannot reach Baton; retrying";
        updated.className = "error";
      }
    }
    clearTimeout(timer);
    timer = setTimeout(tick, POLL_MS);
  }

  window.addEventListener("hashchange", () => {
    syncFilters();
    tick();
  });
  document.addEventListener("visibilitychange", () => {
    if (!document.hidden) tick();
  });

  // -- tasks: filters and actions ------------------------------------------------------------------

  function syncFilters() {
    const { name, params } = route();
    if (name !== "tasks") return;
    for (const field of filters.elements) if (field.name) field.value = params.get(field.name) || "";
  }

  filters.addEventListener("submit", (event) => {
    event.preventDefault();
    const params = new URLSearchParams();
    for (const [name, value] of new FormData(filters)) if (value.trim()) params.set(name, value.trim());
    const text = params.toString();
    location.hash = "tasks" + (text ? "?" + text : "");
  });
  filters.addEventListener("reset", () => setTimeout(() => { location.hash = "tasks"; }));

  // -- overview and schedulers: the organisation search (a form inside the fragment) ----------------

  document.addEventListener("submit", (event) => {
    const form = event.target.closest("form[data-filters]");
    if (!form) return;
    event.preventDefault();
    const params = new URLSearchParams();  // a new search starts at the first page: no cursor
    for (const [name, value] of new FormData(form)) if (String(value).trim()) params.set(name, String(value).trim());
    const text = params.toString();
    form.querySelector("input[name=q]")?.blur();
    location.hash = form.dataset.filters + (text ? "?" + text : "");
  });

  async function act(method, url, json, done) {
    try {
      const response = await call(method, url, json);
      if (response.ok) flash(done, "ok");
      else flash(await reason(response), "bad");
    } catch (error) {
      if (error instanceof NeedToken) return askForToken(error.message);
      flash(String(error.message || error), "bad");
    }
    tick();
  }

  document.addEventListener("click", (event) => {
    const button = event.target.closest("button[data-action]");
    if (!button) return;
    const id = button.dataset.task;
    if (button.dataset.action === "cancel" && confirm(`Cancel task ${id}?`)) {
      act("PATCH", `/tasks/${encodeURIComponent(id)}`, { status: "cancelled" }, `Task ${id} cancelled`);
    } else if (button.dataset.action === "requeue" && confirm(`Requeue task ${id}?`)) {
      act("POST", `/ui/api/tasks/${encodeURIComponent(id)}/requeue`, undefined, `Task ${id} requeued`);
    }
  });

  document.addEventListener("submit", (event) => {
    const form = event.target.closest("form[data-action='priority']");
    if (!form) return;
    event.preventDefault();
    const priority = Number(form.elements.priority.value);
    form.elements.priority.blur();
    act("PUT", `/ui/api/tasks/${encodeURIComponent(form.dataset.task)}/priority`, { priority }, `Priority set to ${priority}`);
  });

  start();
})();
