// A task group as the group view holds it, apart from the page: its tasks by taskId, kept current by reading
// only what can change (the statuses of unresolved tasks; the whole listing now and then, for tasks that joined or
// were rerun); their order (failures first); why an unscheduled task waits (blocked by a failure, or waiting for
// a task); and what the group as a whole is: finished, running, waiting, or stuck for good.

import { byName } from "./pushes.js";

export const RESOLVED_STATES = new Set(["completed", "failed", "exception"]);
export const ORDER = ["failed", "exception", "running", "pending", "unscheduled", "completed"];
const RANK = Object.fromEntries(ORDER.map((s, i) => [s, i]));

export const PASSED_ON_RERUN = "passed-on-rerun"; // the filter of the tasks that failed, then completed

/**
 * Whether a task completed after a run of it failed (a run resolved `failed`; an exception, such as a worker
 * shut down or a claim that expired, is the queue's own retry, not the task failing).
 * @param {GroupEntry} entry
 */
export function passedOnRerun(entry) {
  const runs = entry.status.runs;
  return entry.status.state === "completed" && runs.slice(0, -1).some((run) => run.state === "failed");
}

export class GroupModel {
  constructor() {
    /** @type {Map<string, GroupEntry>} */
    this.tasks = new Map(); // taskId -> {task, status} as listTaskGroup answers them
    /** @type {GroupInfo | null} */
    this.info = null; // the group's own fields (schedulerId, sealed, expires, …)
    this.blockedMemo = null;
    /** @type {Map<string, GroupEntry[]> | null} */
    this.namesMemo = null; // name -> the tasks of that name, rebuilt when tasks join (put)
  }

  // Entries of listTaskGroup; answers the taskIds whose entry is new or changed.
  /**
   * @param {GroupEntry[]} entries
   */
  put(entries) {
    const changed = [];
    for (const entry of entries) {
      const old = this.tasks.get(entry.status.taskId);
      if (!old || signature(old.status) !== signature(entry.status)) changed.push(entry.status.taskId);
      this.tasks.set(entry.status.taskId, entry);
    }
    this.blockedMemo = null;
    this.namesMemo = null;
    return changed;
  }

  // Statuses of the `statuses` call ([{taskId, status}]); answers the taskIds whose status changed.
  /**
   * @param {Array<{taskId: string, status: TaskStatus}>} statuses
   */
  setStatuses(statuses) {
    const changed = [];
    for (const { taskId, status } of statuses) {
      const entry = this.tasks.get(taskId);
      if (entry && signature(entry.status) !== signature(status)) {
        entry.status = status;
        changed.push(taskId);
      }
    }
    this.blockedMemo = null;
    return changed;
  }

  unresolvedIds() {
    return [...this.tasks.values()].filter((t) => !RESOLVED_STATES.has(t.status.state)).map((t) => t.status.taskId);
  }

  counts() {
    const counts = Object.fromEntries(ORDER.map((s) => [s, 0]));
    for (const t of this.tasks.values()) counts[t.status.state] += 1;
    return counts;
  }

  // The other tasks of the group with this one's name (its label): retriggers of it, or what it retriggered.
  /**
   * @param {GroupEntry} entry
   * @returns {GroupEntry[]}
   */
  sameName(entry) {
    const name = entry.task.metadata.name;
    if (!name) return [];
    if (this.namesMemo === null) {
      this.namesMemo = new Map();
      for (const t of this.tasks.values()) {
        const key = t.task.metadata.name || "";
        this.namesMemo.set(key, [...(this.namesMemo.get(key) || []), t]);
      }
    }
    return (this.namesMemo.get(name) || []).filter((t) => t !== entry);
  }

  // The completed tasks a run of which failed before: intermittent, or fixed by what changed between the runs.
  passedOnRerun() {
    return [...this.tasks.values()].filter(passedOnRerun);
  }

  // The tasks shown for a state filter (a state, or PASSED_ON_RERUN) and a name search: failures first, then
  // running, pending, unscheduled and completed; by name within a state.
  sorted(filter = "", search = "") {
    const needle = search.trim().toLowerCase();
    const kept = filter === PASSED_ON_RERUN ? passedOnRerun : (/** @type {GroupEntry} */ t) => t.status.state === filter;
    return [...this.tasks.values()]
      .filter((t) => (!filter || kept(t))
        && (!needle || (t.task.metadata.name || "").toLowerCase().includes(needle) || t.status.taskId === search.trim()))
      .sort((a, b) => RANK[a.status.state] - RANK[b.status.state]
        || byName(a.task.metadata.name || "", b.task.metadata.name || "")
        || a.status.taskId.localeCompare(b.status.taskId));
  }

  // Why an unscheduled task waits: {failed: [entries of dependencies that failed and block it for good, directly
  // or through another blocked task], waiting: [entries of unresolved dependencies], outside: n (dependencies
  // not in this group)}.
  /**
   * @param {GroupEntry} entry
   */
  why(entry) {
    const failed = [];
    const waiting = [];
    let outside = 0;
    const anyResolution = entry.task.requires === "all-resolved";
    for (const id of entry.task.dependencies || []) {
      if (id === entry.status.taskId) continue;
      const dep = this.tasks.get(id);
      if (!dep) outside += 1;
      else if (!anyResolution && (dep.status.state === "failed" || dep.status.state === "exception")) failed.push(dep);
      else if (this.blocked(dep)) failed.push(dep);
      else if (!RESOLVED_STATES.has(dep.status.state)) waiting.push(dep);
    }
    return { failed, waiting, outside };
  }

  // Whether a task can never run: unscheduled, with a dependency that failed (under all-completed) or is itself
  // blocked so. (Taskcluster resolves such a task as exception, deadline-exceeded, at its deadline.)
  /**
   * @param {GroupEntry} entry
   */
  blocked(entry) {
    if (entry.status.state !== "unscheduled") return false;
    if (this.blockedMemo === null) this.blockedMemo = new Map();
    const id = entry.status.taskId;
    if (this.blockedMemo.has(id)) return this.blockedMemo.get(id);
    this.blockedMemo.set(id, false); // a cycle (never created by the queue) counts as not blocked
    const anyResolution = entry.task.requires === "all-resolved";
    let result = false;
    for (const depId of entry.task.dependencies || []) {
      const dep = depId === id ? null : this.tasks.get(depId);
      if (dep && ((!anyResolution && (dep.status.state === "failed" || dep.status.state === "exception"))
        || this.blocked(dep))) {
        result = true;
        break;
      }
    }
    this.blockedMemo.set(id, result);
    return result;
  }

  // The failed tasks at the root of why a blocked task can never run: the failed or exception dependencies it
  // needs completed, directly or through blocked unscheduled ones (a summary behind tests behind a failed build:
  // the build); the tasks of the group only, each once, in the order found.
  /**
   * @param {GroupEntry} entry
   * @returns {GroupEntry[]}
   */
  roots(entry) {
    /** @type {Map<string, GroupEntry>} */
    const found = new Map();
    const seen = new Set([entry.status.taskId]);
    const walk = (/** @type {GroupEntry} */ from) => {
      const anyResolution = from.task.requires === "all-resolved";
      for (const depId of from.task.dependencies || []) {
        const dep = this.tasks.get(depId);
        if (!dep || seen.has(depId)) continue;
        seen.add(depId);
        if (!anyResolution && (dep.status.state === "failed" || dep.status.state === "exception")) found.set(depId, dep);
        else if (this.blocked(dep)) walk(dep);
      }
    };
    walk(entry);
    return [...found.values()];
  }

  // The group in a sentence's worth of facts: {kind: empty | finished | running | waiting | stuck, …counts}.
  summary() {
    const counts = this.counts();
    const total = this.tasks.size;
    if (total === 0) return { kind: "empty", counts, total };
    const unresolved = total - counts.completed - counts.failed - counts.exception;
    const resolvedTimes = [...this.tasks.values()].map((t) => lastRun(t)?.resolved).filter(Boolean).sort();
    if (unresolved === 0) return { kind: "finished", counts, total, at: resolvedTimes.at(-1) || null };
    const pendingSince = [...this.tasks.values()].filter((t) => t.status.state === "pending")
      .map((t) => lastRun(t)?.scheduled).filter(Boolean).sort();
    const oldestPending = pendingSince[0] || null; // when the longest-waiting pending task was scheduled
    if (counts.running + counts.pending > 0) return { kind: "running", counts, total, unresolved, oldestPending };
    const blocked = [...this.tasks.values()].filter((t) => this.blocked(t));
    if (blocked.length === unresolved) {
      const deadline = blocked.map((t) => t.status.deadline).sort()[0];
      return { kind: "stuck", counts, total, unresolved, blocked: blocked.length, deadline };
    }
    return { kind: "waiting", counts, total, unresolved, blocked: blocked.length };
  }

  // Per task queue with pending tasks here and none of its tasks running here: {taskQueueId, pending, since}
  // (since: the oldest pending task's scheduled time) — candidates for "no worker is taking this queue's work".
  idleQueues() {
    const byQueue = new Map();
    for (const t of this.tasks.values()) {
      const q = t.status.taskQueueId;
      if (!byQueue.has(q)) byQueue.set(q, { taskQueueId: q, pending: 0, running: 0, since: null });
      const entry = byQueue.get(q);
      if (t.status.state === "running") entry.running += 1;
      if (t.status.state === "pending") {
        entry.pending += 1;
        const scheduled = lastRun(t)?.scheduled;
        if (scheduled && (!entry.since || scheduled < entry.since)) entry.since = scheduled;
      }
    }
    return [...byQueue.values()].filter((q) => q.pending > 0 && q.running === 0)
      .map(({ taskQueueId, pending, since }) => ({ taskQueueId, pending, since }));
  }
}

/**
 * @param {GroupEntry} entry
 */
export function lastRun(entry) {
  const runs = entry.status.runs;
  return runs.length ? runs[runs.length - 1] : null;
}

// What of a status the page shows: a change here redraws the task's row.
/**
 * @param {TaskStatus} status
 */
function signature(status) {
  const run = status.runs.length ? status.runs[status.runs.length - 1] : null;
  return `${status.state}|${status.runs.length}|${run ? `${run.state}|${run.started}|${run.resolved}|${run.reasonResolved}` : ""}`;
}
