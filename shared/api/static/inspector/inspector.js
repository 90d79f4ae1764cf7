// The inspector: a hash router over views of task groups, tasks, logs, task queues and workers, and the sign-in.
import * as api from "./api.js";
import { h, message, replace } from "./dom.js";
import { groupView } from "./group.js";
import { indexView } from "./namespaces.js";
import { logView } from "./log.js";
import { queueView, workerView } from "./queue.js";
import { taskView } from "./task.js";

const SLUGID = /^[A-Za-z0-9_-]{8}[Q-T][A-Za-z0-9_-][CGKOSWaeimquy26-][A-Za-z0-9_-]{10}[AQgw]$/;
const TASK_QUEUE = /^[a-zA-Z0-9_-]{1,38}\/[a-z]([-a-z0-9]{0,36}[a-z0-9])?$/;

const view = document.getElementById("view");
let current = null; // the shown view's {stop}

// Routes: #/groups/<id>, #/tasks/<id>, #/tasks/<id>/runs/<runId>/logs/<name>, #/queues/<prov>/<type>,
// #/workers/<prov>/<type>/<group>/<id>, #/index/<namespace>; a query after `?` keeps a view's filter and page.
const ROUTES = [
  [/^\/groups\/([^/?]+)$/, (m, q) => groupView(view, m[1], q)],
  [/^\/tasks\/([^/?]+)$/, (m) => taskView(view, m[1])],
  [/^\/tasks\/([^/?]+)\/runs\/(\d+)\/logs\/(.+)$/, (m) => logView(view, m[1], Number(m[2]), decodeURIComponent(m[3]))],
  [/^\/queues\/([^/?]+)\/([^/?]+)$/, (m) => queueView(view, `${m[1]}/${m[2]}`)],
  [/^\/workers\/([^/?]+)\/([^/?]+)\/([^/?]+)\/([^/?]+)$/, (m) => workerView(view, `${m[1]}/${m[2]}`, m[3], m[4])],
  [/^\/index\/?([^/?]*)$/, (m) => indexView(view, decodeURIComponent(m[1]))],
  [/^\/?$/, () => homeView(view)],
];

function route() {
  if (current && current.stop) current.stop();
  current = null;
  const hash = window.location.hash.replace(/^#/, "") || "/";
  const [path, search] = hash.split("?");
  const query = new URLSearchParams(search || "");
  for (const [pattern, show] of ROUTES) {
    const match = path.match(pattern);
    if (match) {
      current = show(match, query);
      view.focus({ preventScroll: true });
      return;
    }
  }
  replace(view, h("h1", {}, "Not found"), h("p", {}, "There is no such page here. "),
    h("a", { href: "#/" }, "Start again"));
}

function open(id) {
  const value = id.trim();
  if (TASK_QUEUE.test(value)) window.location.hash = `#/queues/${value}`;
  else if (SLUGID.test(value)) window.location.hash = `#/tasks/${value}`;
  else showNotice("error", `"${value}" is neither a taskId, a taskGroupId nor a task queue (provisioner/workerType)`);
}

export function showNotice(kind, text) {
  const notice = document.getElementById("notice");
  replace(notice, text ? message(kind, text) : null);
}

function homeView(target) {
  const queues = h("div", {}, h("p", {}, "Loading task queues…"));
  replace(target,
    h("h1", {}, "Queue inspector"),
    h("p", {}, "Open a task, a task group or a task queue by its id above, or follow a link from the API's answers. ",
      "A task's page links to its group, its task queue, its runs' workers and its logs. ",
      h("a", { href: "#/index/", id: "browse-index" }, "Browse the Index"), " to find completed tasks by name."),
    h("form", { class: "open-group", onsubmit: (event) => {
      event.preventDefault();
      const value = new FormData(event.target).get("group").trim();
      if (SLUGID.test(value)) window.location.hash = `#/groups/${value}`;
      else showNotice("error", `"${value}" is not a taskGroupId`);
    } },
    h("label", { for: "group-id" }, "Task group "),
    h("input", { id: "group-id", name: "group", placeholder: "taskGroupId", autocomplete: "off" }),
    h("button", { type: "submit" }, "Show group")),
    h("h2", {}, "Task queues"), queues);
  api.all("/task-queues", "taskQueues").then((found) => {
    replace(queues, found.length === 0 ? h("p", {}, "No task queue has been seen yet.") : h("ul", { class: "plain" },
      found.map((q) => h("li", {}, h("a", { href: `#/queues/${q.taskQueueId}` }, q.taskQueueId),
        q.description ? ` – ${q.description}` : ""))));
  }).catch((error) => {
    replace(queues, h("p", {}, error.status === 403
      ? "Sign in with credentials that hold queue:list-task-queues to see the task queues."
      : `Task queues could not be listed: ${error.summary || error.message}`));
  });
  return null;
}

// The account box: a sign-in form (clientId and accessToken, checked against the auth service's currentScopes)
// or who is signed in, with sign-out. Credentials stay in this tab (sessionStorage).
function renderAccount() {
  const box = document.getElementById("account");
  const creds = api.credentials();
  if (creds) {
    replace(box, h("span", { class: "who" }, "Signed in as ", h("strong", { id: "signed-in-as" }, creds.clientId)),
      " ", h("button", { type: "button", id: "sign-out", onclick: () => {
        api.signOut();
        api.forgetScopes();
        renderAccount();
        route();
      } }, "Sign out"));
    return;
  }
  const error = h("div", { id: "sign-in-error", class: "sign-in-error", role: "alert" });
  const form = h("form", { id: "sign-in", class: "sign-in", onsubmit: async (event) => {
    event.preventDefault();
    const data = new FormData(form);
    replace(error);
    try {
      await api.signIn(data.get("clientId").trim(), data.get("accessToken").trim());
      renderAccount();
      route();
    } catch (failure) {
      replace(error, failure.status === 401
        ? `Sign-in failed: these credentials were refused (${failure.message.split("\n\n---")[0]})`
        : `Sign-in failed: ${failure.summary || failure.message}`);
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

document.getElementById("goto").addEventListener("submit", (event) => {
  event.preventDefault();
  open(new FormData(event.target).get("id"));
});
window.addEventListener("hashchange", () => {
  showNotice();
  route();
});
renderAccount();
route();
