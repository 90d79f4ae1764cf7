// The decision task's in-tree actions (`public/actions.json`, as taskgraph writes it for Firefox CI; version 1):
// the actions of kind `hook` that apply to a task by its tags, offered on its page, and triggering one through the
// hooks service (the deployment's own, which this queue forwards /api/hooks/ to), its hookPayload rendered with
// JSON-e (json-e.js, the library Taskcluster's UI uses) in the context Taskcluster's UI gives it: taskGroupId,
// taskId, input and the file's variables. An action whose input has required fields without defaults needs a form
// this page does not have: it is named, not offered.
import * as api from "./api.js";

export const ACTIONS_ARTIFACT = "public/actions.json";

/**
 * The actions of `file` (actions.json) that apply to a task with `tags`: kind `hook`, a context tag-set every one
 * of whose tags the task has (`[{}]`: every task; `[]`: the group only, not a task), by their `order`.
 * @param {any} file
 * @param {Record<string, string>} tags
 * @returns {Array<any>}
 */
export function actionsFor(file, tags) {
  if (!file || file.version !== 1 || !Array.isArray(file.actions)) return [];
  return /** @type {Array<any>} */ (file.actions)
    .filter((/** @type {any} */ a) => a && a.kind === "hook" && typeof a.hookGroupId === "string" && typeof a.hookId === "string"
      && Array.isArray(a.context) && a.context.some((/** @type {Record<string, string>} */ set) =>
      Object.entries(set || {}).every(([k, v]) => tags[k] === v)))
    .sort((/** @type {any} */ a, /** @type {any} */ b) => (a.order ?? 0) - (b.order ?? 0));
}

/**
 * An action's input made of its schema's defaults (the top-level properties'), or null when a required property
 * has none (the action needs a form).
 * @param {any} action
 * @returns {Record<string, unknown> | null}
 */
export function defaultInput(action) {
  const schema = action.schema;
  if (!schema || typeof schema !== "object" || !schema.properties) return {};
  /** @type {Record<string, unknown>} */
  const input = {};
  for (const [name, property] of Object.entries(/** @type {Record<string, any>} */ (schema.properties))) {
    if (property && "default" in property) input[name] = property.default;
  }
  return (schema.required || []).every((/** @type {string} */ name) => name in input) ? input : null;
}

/**
 * The hook's payload for `action` of `file` on `taskId` of `taskGroupId`, rendered by `render` (JSON-e's).
 * @param {(template: any, context: Record<string, unknown>) => unknown} render
 * @param {any} file
 * @param {any} action
 * @param {{taskGroupId: string, taskId: string | null, input: Record<string, unknown>}} context
 */
export function hookPayload(render, file, action, context) {
  return render(action.hookPayload, { ...(file.variables || {}), ...context });
}

/** @type {Promise<(template: any, context: Record<string, unknown>) => unknown> | null} */
let loading = null;

// JSON-e, loaded once when an action is first triggered: a classic script that sets `jsone` on the window.
function jsone() {
  if (!loading) {
    loading = new Promise((resolve, reject) => {
      const script = document.createElement("script");
      script.src = "json-e.js";
      script.onload = () => resolve(/** @type {any} */ (window).jsone);
      script.onerror = () => reject(new Error("json-e.js could not be loaded"));
      document.head.append(script);
    });
  }
  return loading;
}

/**
 * The decision task's actions.json (the task the group is named after, its latest run), or null when it has none
 * or it cannot be read.
 * @param {string} decisionTaskId
 */
export async function readActions(decisionTaskId) {
  try {
    const target = api.url("queue", `/task/${decisionTaskId}/artifacts/${encodeURIComponent(ACTIONS_ARTIFACT)}`);
    const response = await fetch(target, { cache: "no-store" });
    return response.ok ? await response.json() : null;
  } catch {
    return null;
  }
}

/**
 * Triggers `action` on `taskId` through the hooks service; the taskId of the action task it created.
 * @param {any} file
 * @param {any} action
 * @param {string} taskGroupId
 * @param {string} taskId
 * @returns {Promise<string | null>}
 */
export async function triggerAction(file, action, taskGroupId, taskId) {
  const input = defaultInput(action) ?? {};
  const payload = hookPayload(await jsone(), file, action, { taskGroupId, taskId, input });
  const answer = await api.request("POST", "hooks",
    `/hooks/${encodeURIComponent(action.hookGroupId)}/${encodeURIComponent(action.hookId)}/trigger`, { body: payload });
  return answer.taskId || answer.status?.taskId || null;
}
