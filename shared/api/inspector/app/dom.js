// Small DOM helpers. Everything a task's author wrote (names, descriptions, payloads) is set as text, never as
// HTML, so a task cannot put markup or script on the page.

/**
 * @template {keyof HTMLElementTagNameMap} K
 * @param {K} tag
 * @param {Record<string, any> | null} [attrs]
 * @param {...Child} children
 * @returns {HTMLElementTagNameMap[K]}
 */
export function h(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "class") node.className = value;
    else if (key === "style") node.style.cssText = value; // through CSSOM: the page's CSP refuses style attributes
    else if (key === "dataset") Object.assign(node.dataset, value);
    else node.setAttribute(key, value === true ? "" : value);
  }
  append(node, children);
  return node;
}

/**
 * @template {Element} N
 * @param {N} node
 * @param {readonly Child[]} children
 * @returns {N}
 */
export function append(node, children) {
  for (const child of children) {
    if (Array.isArray(child)) append(node, child);
    else if (child !== undefined && child !== null && child !== false) {
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
  }
  return node;
}

/**
 * @template {Element} N
 * @param {N} node
 * @param {...Child} children
 * @returns {N}
 */
export function replace(node, ...children) {
  node.replaceChildren();
  return append(node, children);
}

/**
 * An element of the page's own markup (index.html), which is there.
 * @param {string} id
 * @returns {HTMLElement}
 */
export function byId(id) {
  const node = document.getElementById(id);
  if (!node) throw new Error(`the page has no #${id}`);
  return node;
}

// Only http(s) URLs become links (a task's `source` could be `javascript:`).
/**
 * @param {string} href
 * @param {string} [text]
 * @returns {HTMLAnchorElement | string}
 */
export function safeLink(href, text) {
  try {
    const parsed = new URL(href);
    if (parsed.protocol === "https:" || parsed.protocol === "http:") return h("a", { href: parsed.href }, text ?? href);
  } catch {
    // not a URL: shown as text
  }
  return text ?? href;
}

// Dates in the user's own time zone; the ISO time on hover.
/**
 * @param {string | null | undefined} iso
 */
export function when(iso) {
  if (!iso) return "–";
  const date = new Date(iso);
  return h("time", { datetime: iso, title: iso }, date.toLocaleString());
}

/**
 * @param {string | null | undefined} fromIso
 * @param {string | null} [toIso]
 */
export function duration(fromIso, toIso) {
  if (!fromIso) return "–";
  const ms = (toIso ? new Date(toIso) : new Date()).getTime() - new Date(fromIso).getTime();
  if (ms < 0) return "–";
  const s = Math.round(ms / 1000);
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

export const STATES = ["unscheduled", "pending", "running", "completed", "failed", "exception"];
export const RESOLVED = new Set(["completed", "failed", "exception"]);

/**
 * @param {string} state
 */
export function badge(state) {
  return h("span", { class: `state state-${state}`, dataset: { state } }, state);
}

/**
 * @param {"error" | "info" | "ok" | "warning"} kind
 * @param {Child} text
 */
export function message(kind, text) {
  return h("div", { class: `message message-${kind}`, role: kind === "error" ? "alert" : "status" }, text);
}

// Each view names its tab: what it shows first, then the inspector.
/**
 * @param {string} text
 */
export function setTitle(text) {
  document.title = text ? `${text} · Queue inspector` : "Queue inspector";
}

// The page for an address whose id is not a slugid (`what`: "taskId" or "taskGroupId"), instead of the queue's
// refusal with its regular expression.
/**
 * @param {HTMLElement} target
 * @param {string} what
 * @returns {null}
 */
export function notASlugid(target, what) {
  replace(target, h("h1", {}, `Not a ${what}`), message("error", `A ${what} is a slugid: 22 characters of letters, `
    + "digits, - and _, as the queue gives them."));
  return null;
}
