// Pushes as the start page lists them (listRecentTaskGroups, this queue's extension): the worst state of a push's
// tasks, its counts in words, the filter, and finding a push by revision or a task by its label (name).

const nf = new Intl.NumberFormat("en");

// The state a push's row is coloured with: its worst task's (failed, exception, running), else completed.
/**
 * @param {Push} push
 */
export function worstState(push) {
  const c = push.counts;
  if (!c) return push.unresolved ? "running" : "completed";
  if (c.failed > 0) return "failed";
  if (c.exception > 0) return "exception";
  if (c.unresolved > 0 || push.unresolved) return "running";
  return "completed";
}

// A count as said: "1,000+" when the queue stopped counting there.
/**
 * @param {number} n
 * @param {boolean | undefined} atLeast
 */
function counted(n, atLeast) {
  return atLeast && n >= 1000 ? `${nf.format(n)}+` : nf.format(n);
}

// What a push's row says of its tasks: "running · 12 unfinished · 1 failed", "finished · all completed".
/**
 * @param {Push} push
 */
export function countsText(push) {
  const c = push.counts;
  const parts = [push.unresolved ? "running" : "finished"];
  if (!c) return parts.join("");
  if (c.unresolved) parts.push(`${counted(c.unresolved, c.atLeast)} unfinished`);
  if (c.failed) parts.push(`${counted(c.failed, c.atLeast)} failed`);
  if (c.exception) parts.push(`${counted(c.exception, c.atLeast)} exception`);
  if (c.rerunWaiting) parts.push(`${counted(c.rerunWaiting, c.atLeast)} to rerun`);
  if (!push.unresolved && !c.failed && !c.exception && !c.rerunWaiting) parts.push("all completed");
  return parts.join(" · ");
}

// The words a push is found by: its group, decision task's name and owner, project and revision.
/**
 * @param {Push} push
 */
export function pushWords(push) {
  const d = push.decisionTask || {};
  return [push.taskGroupId, d.name, d.owner, push.project, push.revision, push.schedulerId]
    .filter(Boolean).join(" ").toLowerCase();
}

// The pushes whose words hold every word of `filter`.
/**
 * @param {Push[]} pushes
 * @param {string} filter
 */
export function filterPushes(pushes, filter) {
  const words = filter.toLowerCase().split(/\s+/).filter(Boolean);
  return pushes.filter((p) => {
    const said = pushWords(p);
    return words.every((w) => said.includes(w));
  });
}

export const REVISION = /^[0-9a-f]{12,40}$/;

// The pushes of `revision` (a prefix of 12 or more hex digits), of `project` when given.
/**
 * @param {Push[]} pushes
 * @param {string} revision
 * @param {string} [project]
 */
export function pushesOf(pushes, revision, project = "") {
  return pushes.filter((p) => p.revision && (p.revision.startsWith(revision) || revision.startsWith(p.revision))
    && (!project || p.project === project));
}

// A Treeherder push URL's project and revision (`/jobs?repo=<project>&revision=<rev>`, the older `/#/jobs?…`,
// push-health's `/push-health/push?repo=…&revision=…`), or null.
/**
 * @param {URL} url
 */
export function treeherderPush(url) {
  const query = url.search.length > 1 ? url.searchParams : new URLSearchParams(url.hash.split("?")[1] || "");
  const project = query.get("repo");
  const revision = query.get("revision");
  if (!project || !revision || !REVISION.test(revision)) return null;
  return { project, revision };
}

// The Index path of a push's decision task from the deployment's template, or null when it cannot be filled.
/**
 * @param {string | undefined} template
 * @param {string} project
 * @param {string} revision
 */
export function pushIndexPath(template, project, revision) {
  if (!template || (template.includes("{project}") && !project)) return null;
  return template.replaceAll("{project}", project).replaceAll("{revision}", revision);
}

// Task names compared as people read them: `test-10` after `test-2`.
export const byName = new Intl.Collator("en", { numeric: true, sensitivity: "base" }).compare;

// The project and revision of a task's Treeherder route (`tc-treeherder.v2.<project>.<revision>[.<pushId>]`), or
// null.
/**
 * @param {string[] | undefined} routes
 */
export function treeherderOf(routes) {
  for (const route of routes || []) {
    const found = /^tc-treeherder(?:-staging)?\.(?:v2\.)?([^.]+)\.([0-9a-f]{12,40})(?:\.|$)/.exec(route);
    if (found) return { project: found[1], revision: found[2] };
  }
  return null;
}

const INDEX = /^index\..*\bv2\.([^.]+)\.revision\.([0-9a-f]{12,40})\./;
const SOURCES = [
  /^https?:\/\/github\.com\/[^/]+\/([^/]+)\/(?:raw|blob|tree|commit)\/([0-9a-f]{12,40})(?:\/|$)/,
  /^https?:\/\/[^/]+\/(?:[^/]+\/)*?([^/]+)\/(?:raw-file|file|rev)\/([0-9a-f]{12,40})(?:\/|$)/,
];

/**
 * The push a decision task built, read as the queue reads it for listRecentTaskGroups (shared/domain/decision_tasks.py):
 * its Treeherder route, an Index route with `.v2.<project>.revision.<rev>.`, its `<X>_HEAD_REV` and
 * `<X>_HEAD_REPOSITORY` environment, or its metadata.source; null when none says.
 * @param {TaskDefinition} task
 * @returns {{project: string, revision: string} | null}
 */
export function pushOf(task) {
  const routes = task.routes || [];
  const routed = treeherderOf(routes);
  if (routed) return routed;
  for (const route of routes) {
    const found = INDEX.exec(route);
    if (found) return { project: found[1], revision: found[2] };
  }
  const env = /** @type {Record<string, unknown>} */ ((task.payload || {}).env || {});
  for (const [key, value] of Object.entries(env)) {
    if (key.endsWith("_HEAD_REV") && REVISION.test(String(value))) {
      const repository = String(env[`${key.slice(0, -"_REV".length)}_REPOSITORY`] || "");
      return { project: repository.replace(/\/+$/, "").split("/").pop() || "", revision: String(value) };
    }
  }
  for (const pattern of SOURCES) {
    const found = pattern.exec(task.metadata.source || "");
    if (found) return { project: found[1], revision: found[2] };
  }
  return null;
}

