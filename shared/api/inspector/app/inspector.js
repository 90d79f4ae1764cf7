// The inspector: a hash router over views of task groups, tasks, logs, task queues and workers, and the sign-in.
import { understand } from "./addresses.js";
import * as api from "./api.js";
import { byId, h, message, replace, setTitle } from "./dom.js";
import { findLabel, findPush, findQueueOrLabel } from "./finding.js";
import { groupView } from "./group.js";
import { homeView } from "./home.js";
import { indexView } from "./namespaces.js";
import { logView } from "./log.js";
import { queueView, workerView } from "./queue.js";
import { taskView } from "./task.js";

const view = byId("view");
/** @type {View | null} */
let current = null; // the shown view's {stop, anchor}
/** @type {string | null} */
let shown = null; // the address of the shown view, without its line anchor
/** @type {string | null} */
let shownPath = null; // the same without its query

// Routes: #/groups/<id>, #/tasks/<id>, #/tasks/<id>/runs/<runId>/logs/<name>, #/queues/<prov>/<type>,
// #/workers/<prov>/<type>/<group>/<id>, #/index/<namespace>; a query after `?` keeps a view's filter and page; a
// log's address may end with a line anchor (`#L12`, `#L12-L20`).
/** @type {Array<[RegExp, (match: RegExpMatchArray, query: URLSearchParams, anchor: string) => View | null]>} */
const ROUTES = [
  [/^\/groups\/([^/?]+)$/, (m, q) => groupView(view, m[1], q)],
  [/^\/tasks\/([^/?]+)$/, (m) => taskView(view, m[1])],
  [/^\/tasks\/([^/?]+)\/runs\/(\d+)\/logs\/(.+)$/,
    (m, q, anchor) => logView(view, m[1], Number(m[2]), decodeURIComponent(m[3]), anchor)],
  [/^\/queues\/([^/?]+)\/([^/?]+)$/, (m) => queueView(view, `${m[1]}/${m[2]}`)],
  [/^\/workers\/([^/?]+)\/([^/?]+)\/([^/?]+)\/([^/?]+)$/, (m) => workerView(view, `${m[1]}/${m[2]}`, m[3], m[4])],
  [/^\/index\/?([^/?]*)$/, (m) => indexView(view, decodeURIComponent(m[1]))],
  [/^\/?$/, (m, q) => homeView(view, showNotice, q)],
];

// `again`: show the view anew even if the address did not change (after signing in or out).
function route(again = false) {
  const whole = window.location.hash.replace(/^#/, "") || "/";
  const anchor = (/#L\d+(?:-L?\d+)?$/.exec(whole) || [""])[0];
  const hash = whole.slice(0, whole.length - anchor.length);
  const [path, search] = hash.split("?");
  if (!again && current && path === shownPath) {
    if (hash === shown && current.anchor) {
      current.anchor(anchor); // only the line anchor changed: the view stays
      return;
    }
    if (hash !== shown && current.update) {
      shown = hash;
      current.update(new URLSearchParams(search || "")); // another filter or page of the same view: no re-read
      return;
    }
  }
  if (current && current.stop) current.stop();
  current = null;
  shown = hash;
  shownPath = path;
  const query = new URLSearchParams(search || "");
  for (const [pattern, show] of ROUTES) {
    const match = path.match(pattern);
    if (match) {
      current = show(match, query, anchor);
      view.focus({ preventScroll: true });
      return;
    }
  }
  setTitle("Not found");
  replace(view, h("h1", {}, "Not found"), h("p", {}, "There is no such page here. "),
    h("a", { href: "#/" }, "Start again"));
}

// The task group the reader is in: the group page's, or the group of the task page's task; null elsewhere. A
// label is looked for there first (a sheriff on a push pastes a label of that push).
async function groupBeingRead() {
  const at = /^#\/(groups|tasks)\/([A-Za-z0-9_-]{22})(?:[/?]|$)/.exec(window.location.hash);
  if (!at) return null;
  if (at[1] === "groups") return at[2];
  try {
    return (await api.get(`/task/${at[2]}`)).taskGroupId;
  } catch {
    return null;
  }
}

// The Open box: a taskId or taskGroupId (the queue is asked which: a task first, as a decision task's id is also
// its group's), a task queue, an index path, a revision, a task's label, or a URL of Taskcluster's UI, of this
// inspector, of the API or of Treeherder (a job or a push).
/**
 * @param {string} input
 */
async function open(input) {
  const found = understand(input);
  if (found.error) {
    showNotice("error", found.error);
    return;
  }
  if (found.route) {
    window.location.hash = `#${found.route}`;
    return;
  }
  const lookup = found.revision ? () => findPush(found.revision)
    : found.push ? () => findPush(found.push.revision, found.push.project)
      : found.queueOrLabel ? async () => findQueueOrLabel(found.queueOrLabel, await groupBeingRead())
        : found.label ? async () => findLabel(found.label, await groupBeingRead()) : null;
  if (lookup) {
    showNotice("info", `Looking for ${input.trim()}…`);
    const where = await lookup();
    if (where.error) showNotice("error", where.error);
    else {
      showNotice();
      window.location.hash = `#${where.route}`;
    }
    return;
  }
  if (found.indexPath) {
    try {
      const indexed = await api.request("GET", "index", `/task/${found.indexPath}`);
      window.location.hash = `#/tasks/${indexed.taskId}`;
    } catch {
      window.location.hash = `#/index/${found.indexPath}`; // a namespace, or nothing indexed there yet
    }
    return;
  }
  const id = found.slug;
  try {
    await api.get(`/task/${id}/status`);
    window.location.hash = `#/tasks/${id}`;
    return;
  } catch (error) {
    if (api.statusOf(error) !== 404) {
      showNotice("error", `${id} could not be looked up: ${api.said(error)}`);
      return;
    }
  }
  try {
    await api.get(`/task-group/${id}/list`, { limit: 1 });
    window.location.hash = `#/groups/${id}`;
  } catch (error) {
    showNotice("error", api.statusOf(error) === 404 ? `There is no task and no task group ${id}.`
      : `${id} could not be looked up: ${api.said(error)}`);
  }
}

/**
 * @param {"error" | "info"} [kind]
 * @param {string} [text]
 */
export function showNotice(kind, text) {
  const notice = byId("notice");
  replace(notice, text ? message(kind ?? "info", text) : null);
}

// The account box: a sign-in form (clientId and accessToken, checked against the auth service's currentScopes)
// or who is signed in, until when, with sign-out. The sign-in is this browser's, shared by its tabs, for
// api.SESSION_MS (a Ctrl+clicked failure opens signed in); signing out ends it in every tab.
function renderAccount() {
  const box = byId("account");
  const creds = api.credentials();
  if (creds) {
    const until = api.signedInUntil();
    replace(box, h("span", { class: "who" }, "Signed in as ", h("strong", { id: "signed-in-as" }, creds.clientId),
      until ? h("span", { class: "signed-in-until", id: "signed-in-until", title: new Date(until).toISOString() },
        ` until ${new Date(until).toLocaleString([], { weekday: "short", hour: "2-digit", minute: "2-digit" })}`)
        : null),
      " ", h("button", { type: "button", id: "sign-out", onclick: () => {
        api.signOut();
        api.forgetScopes();
        renderAccount();
        route(true);
      } }, "Sign out"));
    return;
  }
  const error = h("div", { id: "sign-in-error", class: "sign-in-error", role: "alert" });
  const form = h("form", { id: "sign-in", class: "sign-in", onsubmit: async (/** @type {SubmitEvent} */ event) => {
    event.preventDefault();
    const data = new FormData(form);
    replace(error);
    try {
      await api.signIn(String(data.get("clientId")).trim(), String(data.get("accessToken")).trim());
      renderAccount();
      route(true);
    } catch (failure) {
      const said = (failure instanceof Error ? failure.message : String(failure)).split("\n\n---")[0];
      // Taskcluster's words for a wrong token ("Unauthorized: Bad mac") say little to a person: say what to check.
      const hint = /bad mac/i.test(said) ? ": the accessToken does not match this clientId" : "";
      replace(error, api.statusOf(failure) === 401
        ? `Sign-in failed: these credentials were refused (${said})${hint}`
        : `Sign-in failed: ${api.said(failure)}`);
    }
  } },
  h("label", { for: "client-id", class: "visually-hidden" }, "clientId"),
  h("input", { id: "client-id", name: "clientId", placeholder: "clientId", required: true, autocomplete: "username" }),
  h("label", { for: "access-token", class: "visually-hidden" }, "accessToken"),
  h("input", { id: "access-token", name: "accessToken", type: "password", placeholder: "accessToken",
    required: true, autocomplete: "current-password" }),
  h("button", { type: "submit" }, "Sign in"));
  replace(box, h("span", { class: "who" }, "Anonymous"), form, error);
}

// The footer names the running release (Dockerflow's /__version__): what an operator reports with a problem.
async function renderAbout() {
  try {
    const about = await api.request("GET", "queue", "/__version__", { creds: null });
    const commit = about.commit === "unknown" ? "commit unknown" : `commit ${about.commit.slice(0, 12)}`;
    replace(byId("about"), `tc-azure-queue ${about.version} · ${commit}`);
  } catch {
    // an older queue without /__version__: no footer
  }
}

document.getElementById("goto")?.addEventListener("submit", (event) => {
  event.preventDefault();
  open(String(new FormData(/** @type {HTMLFormElement} */ (event.target)).get("id")));
});
window.addEventListener("hashchange", () => {
  showNotice();
  route();
});
function accountChanged() {
  api.forgetScopes();
  renderAccount();
  route(true);
}
api.onSignInElsewhere(accountChanged);
// A sign-in that ends while the page is open: the page says so within a minute, and calls anonymously.
setInterval(() => {
  if (document.getElementById("signed-in-as") && !api.credentials()) accountChanged();
}, 60000);
renderAccount();
renderAbout();
route();
