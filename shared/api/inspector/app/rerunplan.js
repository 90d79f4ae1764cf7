// The plan "Rerun failed" carries out (group.js), without the page: each failed or exception task is rerun with
// rerunTaskWhenReady; one whose dependencies have all completed (resolved, for `all-resolved`) runs now, any other
// only once they have, which the queue enforces whatever the page does next. A dependency rerun in the same batch,
// or already waiting for its own rerun, is unmet, for `all-resolved` too, as the queue decides it
// (shared/operations/reruns.py); the ones that wait are asked dependencies first, so that each is asked once what
// it depends on is marked. The confirm box shows this plan and the result names what the queue answered.
import { byName } from "./pushes.js";

const RESOLVED = new Set(["completed", "failed", "exception"]);

/**
 * @param {GroupEntry[]} tasks the entries to rerun
 * @param {Map<string, GroupEntry>} known the group's entries by taskId
 * @param {Map<string, string[]>} waiting the group's tasks already waiting for their rerun
 * @returns {{now: GroupEntry[], later: GroupEntry[]}}
 */
export function rerunPlan(tasks, known, waiting) {
  /** @type {{now: GroupEntry[], later: GroupEntry[]}} */
  const plan = { now: [], later: [] };
  const rerunning = new Set(tasks.map((t) => t.status.taskId));
  for (const t of tasks) {
    const anyResolution = t.task.requires === "all-resolved";
    const ready = (t.task.dependencies || []).every((id) => {
      if (id === t.status.taskId) return true; // a task may name itself (a decision task does)
      if (rerunning.has(id) || waiting.has(id)) return false;
      const dep = known.get(id);
      const state = dep ? dep.status.state : "unknown";
      return state === "completed" || (anyResolution && RESOLVED.has(state));
    });
    (ready ? plan.now : plan.later).push(t);
  }
  plan.later = dependenciesFirst(plan.later);
  return plan;
}

// The tasks ordered so that each comes after those of them it depends on.
/**
 * @param {GroupEntry[]} tasks
 * @returns {GroupEntry[]}
 */
export function dependenciesFirst(tasks) {
  const byId = new Map(tasks.map((t) => [t.status.taskId, t]));
  /** @type {GroupEntry[]} */
  const out = [];
  const placed = new Set();
  /**
   * @param {GroupEntry} t
   * @param {Set<string>} path
   */
  const visit = (t, path) => {
    const id = t.status.taskId;
    if (placed.has(id) || path.has(id)) return;
    path.add(id);
    for (const dep of t.task.dependencies || []) {
      const entry = byId.get(dep);
      if (entry) visit(entry, path);
    }
    placed.add(id);
    out.push(t);
  };
  for (const t of tasks) visit(t, new Set());
  return out;
}

// Up to five names, as people sort them, and how many more.
/**
 * @param {GroupEntry[]} tasks
 */
export function names(tasks) {
  const all = tasks.map((t) => t.task.metadata.name || t.status.taskId).sort(byName);
  const shown = all.slice(0, 5);
  return shown.join(", ") + (all.length > shown.length ? ` and ${all.length - shown.length} more` : "");
}
