// The API as the inspector calls it: the queue (and the auth service's currentScopes) under the rootUrl this page
// is served from, signed with the credentials of the sign-in (kept in this browser's localStorage for SESSION_MS,
// shared by its tabs, until signed out).
import * as hawk from "./hawk.js";

// The page is <rootUrl>/inspector/: the rootUrl is its parent.
export const rootUrl = new URL("../", window.location.href).href.replace(/\/$/, "");
const STORAGE_KEY = "tc-inspector-credentials";
export const SESSION_MS = 12 * 3600 * 1000; // how long a sign-in lasts in this browser: a working day

export class ApiError extends Error {
  /**
   * @param {number} status
   * @param {string | undefined} code
   * @param {string} message
   */
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
  // The first paragraph of Taskcluster's error message (the rest is request details).
  get summary() {
    return `${this.code || this.status}: ${this.message.split("\n\n---")[0]}`;
  }
}

/**
 * The credentials of the sign-in, while it lasts (every tab of this browser shares it); null when signed out,
 * expired (and then forgotten) or unreadable.
 * @returns {Credentials | null}
 */
export function credentials() {
  const stored = localStorage.getItem(STORAGE_KEY);
  if (!stored) return null;
  try {
    const { creds, expires } = JSON.parse(stored);
    if (typeof expires === "number" && expires > Date.now() && creds?.clientId && creds?.accessToken) return creds;
  } catch {
    // written by something else: forgotten below
  }
  localStorage.removeItem(STORAGE_KEY);
  return null;
}

/** When the sign-in ends (ms since the epoch), or null. */
export function signedInUntil() {
  try {
    const expires = JSON.parse(localStorage.getItem(STORAGE_KEY) || "null")?.expires;
    return typeof expires === "number" && credentials() ? expires : null;
  } catch {
    return null;
  }
}

// Signing out ends the sign-in in every tab (they hear it as a `storage` event).
export function signOut() {
  localStorage.removeItem(STORAGE_KEY);
}

/**
 * Calls `changed` when another tab of this browser signs in or out.
 * @param {() => void} changed
 */
export function onSignInElsewhere(changed) {
  window.addEventListener("storage", (event) => {
    if (event.key === STORAGE_KEY || event.key === null) changed();
  });
}

/** @type {string[] | null} */
let held = null; // scopes of the current credentials (or the anonymous ones), from currentScopes
/** @type {string | null} */
let heldFor = null; // the credentials `held` belongs to (JSON)

/**
 * @param {string} service
 * @param {string} path
 * @param {Record<string, unknown>} [query]
 */
export function url(service, path, query) {
  const qs = query ? new URLSearchParams(Object.entries(query).filter(([, v]) => v !== undefined && v !== null)
    .map(([k, v]) => [k, String(v)])).toString() : "";
  return `${rootUrl}/api/${service}/v1${path}${qs ? `?${qs}` : ""}`;
}

/**
 * @param {string} method
 * @param {string} service
 * @param {string} path
 * @param {{query?: Record<string, any>, body?: any, creds?: any}} [options]
 */
export async function request(method, service, path, { query, body, creds = credentials() } = {}) {
  const target = url(service, path, query);
  /** @type {Record<string, string>} */
  const headers = { Accept: "application/json" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (creds) headers.Authorization = await hawk.header(creds, method, target);
  let response;
  try {
    response = await fetch(target, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  } catch (error) {
    throw new ApiError(0, "NetworkError", `The queue at ${rootUrl} could not be reached (${said(error)})`);
  }
  const text = await response.text();
  let answer;
  try {
    answer = text ? JSON.parse(text) : null;
  } catch {
    answer = null;
  }
  if (!response.ok) {
    throw new ApiError(response.status, answer && answer.code, (answer && answer.message) || text || response.statusText);
  }
  return answer;
}

/**
 * The HTTP status a failed call was answered with (0: no answer, or not a call that failed).
 * @param {unknown} error
 */
export function statusOf(error) {
  return error instanceof ApiError ? error.status : 0;
}

/**
 * What a failure says on the page: the queue's summary of its error, or the error's own message.
 * @param {unknown} error
 */
export function said(error) {
  if (error instanceof ApiError) return error.summary;
  return error instanceof Error ? error.message : String(error);
}

/**
 * The scopes a 403 answer says are missing (its "Missing: <expression>"), or "".
 * @param {unknown} error
 */
export function missingScopes(error) {
  const missing = /Missing: ([^\n]+)/.exec(error instanceof Error ? error.message : "");
  return missing ? missing[1].trim().replace(/^\((.*)\)$/, "$1") : "";
}

// What to do about a refused read of `what`: signed in, which scopes the credentials lack; else, sign in.
/**
 * @param {unknown} error
 * @param {string} what
 */
export function refusal(error, what) {
  const lacking = missingScopes(error);
  const takes = lacking ? `: it takes ${lacking}` : "";
  return credentials() ? `Your credentials may not see ${what}${takes}.`
    : `Sign in with credentials that may see ${what}${takes}.`;
}

/**
 * @param {string} path
 * @param {Record<string, unknown>} [query]
 * @returns {Promise<any>}
 */
export const get = (path, query) => request("GET", "queue", path, { query });
/**
 * @param {string} path
 * @param {unknown} [body]
 * @returns {Promise<any>}
 */
export const post = (path, body = {}) => request("POST", "queue", path, { body });

// Every page of a listing (`key` holds the items), calling `onPage` with each page's items as it comes.
/**
 * @param {string} path
 * @param {string} key
 * @param {{limit?: number, onPage?: (page: any) => void, service?: string}} [options]
 */
export async function all(path, key, { limit = 1000, onPage, service = "queue" } = {}) {
  const items = [];
  let token;
  do {
    const page = await request("GET", service, path, { query: { limit, continuationToken: token } });
    items.push(...page[key]);
    if (onPage) onPage(page);
    token = page.continuationToken;
  } while (token);
  return items;
}

// Check credentials by asking the auth service which scopes they hold; a wrong clientId or accessToken answers
// 401 here, and nothing is kept.
/**
 * @param {string} clientId
 * @param {string} accessToken
 * @param {string} [certificate]
 */
export async function signIn(clientId, accessToken, certificate) {
  /** @type {Credentials} */
  const creds = { clientId, accessToken };
  if (certificate) creds.certificate = certificate;
  const answer = await request("GET", "auth", "/scopes/current", { creds });
  localStorage.setItem(STORAGE_KEY, JSON.stringify({ creds, expires: Date.now() + SESSION_MS }));
  held = answer.scopes;
  heldFor = JSON.stringify(creds);
  return answer.scopes;
}

// The scopes of the current credentials, asked once per credentials: an answer for credentials that changed while
// it was asked (a sign-in meanwhile) is not kept, lest the anonymous scopes replace those just signed in with.
/** @returns {Promise<string[]>} */
export async function scopes() {
  const who = JSON.stringify(credentials());
  if (held !== null && heldFor === who) return held;
  /** @type {string[]} */
  let answer;
  try {
    answer = (await request("GET", "auth", "/scopes/current")).scopes;
  } catch {
    answer = [];
  }
  if (JSON.stringify(credentials()) === who) {
    held = answer;
    heldFor = who;
  }
  return answer;
}

export function forgetScopes() {
  held = null;
}

// Taskcluster's scope satisfaction: a held scope ending in `*` covers every scope it is a prefix of.
/**
 * @param {readonly string[]} heldScopes
 * @param {ScopeExpression} expression
 * @returns {boolean}
 */
export function satisfied(heldScopes, expression) {
  if (typeof expression === "string") {
    return heldScopes.some((h) => h === expression || (h.endsWith("*") && expression.startsWith(h.slice(0, -1))));
  }
  if ("AnyOf" in expression) return expression.AnyOf.some((e) => satisfied(heldScopes, e));
  if ("AllOf" in expression) return expression.AllOf.every((e) => satisfied(heldScopes, e));
  return false;
}

// The queue's scope expression for an action on a task (shared/api/queue_v1/common.py, project_or_scheduler).
/**
 * @param {string} action
 * @param {TaskDefinition} task
 * @param {string} taskId
 * @returns {ScopeExpression}
 */
export function actionScopes(action, task, taskId) {
  return { AnyOf: [
    `queue:${action}:${task.schedulerId}/${task.taskGroupId}/${taskId}`,
    `queue:${action}-in-project:${task.projectId || "none"}`,
    { AllOf: [`queue:${action}`, `assume:scheduler-id:${task.schedulerId}/${task.taskGroupId}`] },
  ] };
}

// A new taskId: a v4 UUID as Taskcluster's slugid makes it (22 characters of URL-safe base64, its first bit 0).
export function newSlugid() {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  bytes[6] = (bytes[6] & 0x0f) | 0x40; // version 4
  bytes[8] = (bytes[8] & 0x3f) | 0x80; // RFC 4122 variant
  bytes[0] &= 0x7f; // "nice" slugids never start with "-"
  return btoa(String.fromCharCode(...bytes)).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

const PRIORITIES = ["highest", "very-high", "high", "medium", "low", "very-low", "lowest"];

// The scopes createTask asks for a task (its scopes, a route scope per route, its project, its scheduler, and its
// priority or a higher one on its task queue): what a retrigger, a copy of the task, takes.
/**
 * @param {TaskDefinition} task
 * @returns {ScopeExpression}
 */
export function createScopes(task) {
  const queue = task.taskQueueId || `${task.provisionerId}/${task.workerType}`;
  const priorities = PRIORITIES.slice(0, PRIORITIES.indexOf(task.priority || "lowest") + 1);
  return { AllOf: [...(task.scopes || []), ...(task.routes || []).map((r) => `queue:route:${r}`),
    `queue:create-task:project:${task.projectId || "none"}`, `queue:scheduler-id:${task.schedulerId}`,
    { AnyOf: priorities.map((p) => `queue:create-task:${p}:${queue}`) }] };
}

// Where a browser reads an artifact: the queue's getArtifact URL, signed when the anonymous scopes do not cover
// it (names outside public/) and the user is signed in.
/**
 * @param {string} taskId
 * @param {number} runId
 * @param {string} name
 */
export function artifactUrl(taskId, runId, name) {
  const target = url("queue", `/task/${taskId}/runs/${runId}/artifacts/${encodeURIComponent(name)}`);
  const creds = credentials();
  if (name.startsWith("public/") || !creds) return Promise.resolve(target);
  return hawk.signedUrl(creds, target);
}
