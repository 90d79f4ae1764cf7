// The page the queue serves at Taskcluster's UI addresses (`<rootUrl>/tasks/<taskId>`, …): it opens the same thing
// in the inspector, keeping a log's line anchor (`#L12`), which a server-side redirect would lose. An artifact's
// address leads to the artifact through the queue's API, as Taskcluster's UI does.
import { markedPath, routeOf } from "./addresses.js";

const root = new URL("../", import.meta.url); // this file is <rootUrl>/inspector/address.js
const path = markedPath(window.location.pathname.slice(root.pathname.length - 1)) || "/";
const route = routeOf(path, window.location.hash) || "/";
if (typeof route === "object") {
  const { taskId, runId, name } = route.artifact;
  window.location.replace(new URL(`api/queue/v1/task/${taskId}/runs/${runId}/artifacts/${encodeURIComponent(name)}`,
    root).href);
} else {
  const line = /#L\d+(-L?\d+)?$/.exec(window.location.hash);
  window.location.replace(new URL(`inspector/#${route}${line && route.includes("/logs/") ? line[0] : ""}`, root).href);
}
