// What the Open box looks up in the queue: a push by revision (and project) among the recent pushes, then through
// the deployment's Index template; a task by its label (metadata.name) in the newest pushes; a name that reads as
// a task queue, asked first as one. Each answers {route} or {error}.
import * as api from "./api.js";
import { deploymentConfig } from "./config.js";
import { pushIndexPath, pushesOf } from "./pushes.js";

const LABEL_PUSHES = 5; // newest pushes searched for a task label

/** @returns {Promise<Push[]>} */
async function recentPushes() {
  try {
    return (await api.get("/task-groups/recent", { limit: 100 })).taskGroups;
  } catch {
    return []; // not allowed to list them: the Index template may still find it
  }
}

// The push of `project` before the group `groupId` among the recent pushes (newest first), or null: when the
// group is not among them, or the caller may not list them.
/**
 * @param {string} groupId
 * @param {string} project
 * @returns {Promise<Push | null>}
 */
export async function previousPush(groupId, project) {
  const recent = await recentPushes();
  const at = recent.findIndex((p) => p.taskGroupId === groupId);
  if (at < 0) return null;
  return recent.slice(at + 1).find((p) => p.project === project) || null;
}

// The group of the decision task indexed for the push, through the deployment's template; null if none.
/**
 * @param {string | undefined} template
 * @param {string} project
 * @param {string} revision
 */
async function indexedPush(template, project, revision) {
  const path = pushIndexPath(template, project, revision);
  if (!path) return null;
  try {
    const { taskId } = await api.request("GET", "index", `/task/${path}`);
    const status = await api.get(`/task/${taskId}/status`);
    return status.status.taskGroupId;
  } catch {
    return null;
  }
}

/**
 * @param {string} revision
 * @param {string} [project]
 */
export async function findPush(revision, project = "") {
  const recent = await recentPushes();
  const found = pushesOf(recent, revision, project);
  if (found.length === 1) return { route: `/groups/${found[0].taskGroupId}` };
  if (found.length > 1) return { route: `/?push=${encodeURIComponent(revision)}` };
  const { pushIndex } = await deploymentConfig();
  const projects = project ? [project] : [...new Set(recent.flatMap((p) => (p.project ? [p.project] : [])))];
  for (const candidate of pushIndex && pushIndex.includes("{project}") ? projects : [""]) {
    const group = await indexedPush(pushIndex, candidate, revision);
    if (group) return { route: `/groups/${group}` };
  }
  const where = project ? ` of ${project}` : "";
  return { error: `No push${where} of revision ${revision} among the recent pushes${
     pushIndex ? " or in the Index" : " (this deployment names no Index path for pushes)"}` };
}

// The task named `label` in the group the reader is in (`within`) first, then in the newest pushes (reading
// their task lists a page at a time); null when none.
/**
 * @param {string} label
 * @param {string | null} [within]
 */
async function taskLabelled(label, within = null) {
  if (within) {
    const here = await labelledIn(within, label);
    if (here) return here;
  }
  for (const push of (await recentPushes()).slice(0, LABEL_PUSHES)) {
    if (push.taskGroupId === within) continue;
    const found = await labelledIn(push.taskGroupId, label);
    if (found) return found;
  }
  return null;
}

/**
 * The task of the group labelled `label` (its name, or its `label` tag), read 1,000 a page; null when none.
 * @param {string} groupId
 * @param {string} label
 */
async function labelledIn(groupId, label) {
  let token;
  do {
    let page;
    try {
      page = await api.get(`/task-group/${groupId}/list`, { limit: 1000, continuationToken: token });
    } catch {
      return null;
    }
    const found = page.tasks.find((/** @type {GroupEntry} */ t) => t.task.metadata.name === label || (t.task.tags || {}).label === label);
    if (found) return found.status.taskId;
    token = page.continuationToken;
  } while (token);
  return null;
}

// A name that reads as a task queue (`provisioner/workerType`) may be a task's label (`build-linux64/opt`): a task
// queue workers asked for work from, or that tasks were created for, first; then a task of that label.
/**
 * @param {string} name
 * @param {string | null} [within] the task group the reader is in, looked in first
 */
export async function findQueueOrLabel(name, within = null) {
  let mayList; // whether the task queues may be asked for (else the queue's page says what that takes)
  try {
    await api.get(`/task-queues/${name}`);
    return { route: `/queues/${name}` };
  } catch (error) {
    mayList = api.statusOf(error) !== 403; // 404: not one workers asked for work from
  }
  const task = await taskLabelled(name, within);
  if (task) return { route: `/tasks/${task}` };
  try {
    const seen = await api.all("/task-queues-seen", "taskQueues");
    if (seen.some((q) => q.taskQueueId === name)) return { route: `/queues/${name}` };
  } catch (error) {
    mayList = mayList && api.statusOf(error) !== 403;
  }
  if (!mayList) return { route: `/queues/${name}` };
  return { error: `There is no task queue ${name} and no task labelled ${name} in the ${LABEL_PUSHES} newest pushes` };
}

/**
 * @param {string} label
 * @param {string | null} [within] the task group the reader is in, looked in first
 */
export async function findLabel(label, within = null) {
  const task = await taskLabelled(label, within);
  return task ? { route: `/tasks/${task}` }
    : { error: `"${label}" is neither a taskId, a taskGroupId, a task queue, an index path, a revision, a URL nor `
      + `the label of a task in the ${LABEL_PUSHES} newest pushes` };
}
