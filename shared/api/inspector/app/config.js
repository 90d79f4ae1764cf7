// What the deployment tells the page (`config.json`, from its settings): the Index path of a push's decision task
// (`pushIndex`, with {project} and {revision}) and Treeherder's address (`treeherder`); {} when it says nothing.
/** @type {Promise<{pushIndex?: string, treeherder?: string}> | null} */
let asked = null;

export function deploymentConfig() {
  if (!asked) {
    asked = fetch("config.json", { headers: { accept: "application/json" } })
      .then((answer) => (answer.ok ? answer.json() : {}))
      .catch(() => ({}));
  }
  return asked;
}
