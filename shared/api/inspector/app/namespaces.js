// The Index: a namespace's namespaces and indexed tasks (#/index/<namespace>; the root is #/index/), each task
// linked to its page, with its rank, expiry and data.
import * as api from "./api.js";
import { h, message, replace, setTitle, when } from "./dom.js";

const PATH = /^([\x21-\x7e]{1,255})?$/;

/**
 * @param {string} namespace
 */
function crumbs(namespace) {
  const words = namespace ? namespace.split(".") : [];
  /** @type {Child[]} */
  const links = [h("a", { href: "#/index/" }, "Index")];
  words.forEach((word, i) => {
    links.push(" . ", h("a", { href: `#/index/${words.slice(0, i + 1).join(".")}` }, word));
  });
  return h("nav", { "aria-label": "Namespace" }, links);
}

/**
 * @param {unknown} error
 * @param {string} scope
 */
function failure(error, scope) {
  return message("error", api.statusOf(error) === 403
    ? `Sign in with credentials that hold ${scope} to see this.`
    : `It could not be read: ${api.said(error)}`);
}

/**
 * @param {HTMLElement} target
 * @param {string} namespace
 */
export function indexView(target, namespace) {
  setTitle(namespace ? `Index ${namespace}` : "The Index");
  if (!PATH.test(namespace)) {
    replace(target, h("h1", {}, "Not an index path"), h("p", {}, "An index path is dot-separated words."));
    return null;
  }
  const below = h("div", { id: "index-namespaces" }, h("p", {}, "Loading namespaces…"));
  const tasks = h("div", { id: "index-tasks" }, h("p", {}, "Loading indexed tasks…"));
  replace(target, crumbs(namespace), h("h1", {}, namespace || "The Index"),
    h("p", {}, "Completed tasks are indexed at their ", h("code", {}, "index.<path>"), " routes. ",
      "Open a namespace, or a task indexed here."),
    h("h2", {}, "Namespaces"), below, h("h2", {}, "Indexed tasks"), tasks);
  const path = namespace ? `/${namespace}` : "/";
  api.all(`/namespaces${path}`, "namespaces", { service: "index" }).then((found) => {
    replace(below, found.length === 0 ? h("p", {}, "No namespace below this one.") : h("ul", { class: "plain" },
      found.map((n) => h("li", {}, h("a", { href: `#/index/${n.namespace}` }, n.name),
        " – expires ", when(n.expires)))));
  }).catch((error) => replace(below, failure(error, `index:list-namespaces:${namespace}`)));
  api.all(`/tasks${path}`, "tasks", { service: "index" }).then((found) => {
    replace(tasks, found.length === 0 ? h("p", {}, "No task is indexed directly in this namespace.") : h("table", {},
      h("thead", {}, h("tr", {}, h("th", {}, "Name"), h("th", {}, "Task"), h("th", {}, "Rank"),
        h("th", {}, "Expires"), h("th", {}, "Data"))),
      h("tbody", {}, found.map((t) => h("tr", {},
        h("td", {}, t.namespace.split(".").pop()),
        h("td", {}, h("a", { href: `#/tasks/${t.taskId}` }, t.taskId)),
        h("td", {}, String(t.rank)), h("td", {}, when(t.expires)),
        h("td", {}, h("code", {}, JSON.stringify(t.data))))))));
  }).catch((error) => replace(tasks, failure(error, `index:list-tasks:${namespace}`)));
  return null;
}
