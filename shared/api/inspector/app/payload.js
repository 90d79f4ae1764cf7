// A task's payload as a reader wants it first: the command it runs (docker-worker's argv, generic-worker's list
// of argvs, or the reference worker's), with a Copy button, its image, environment and time limit; the rest of
// the payload as JSON. The whole definition stays below as JSON, with a Copy button too (task.js).
import { h } from "./dom.js";

const SAFE = /^[A-Za-z0-9_@%+=:,./-]+$/;

// One argument as a POSIX shell would need it written.
/**
 * @param {string} arg
 */
export function quote(arg) {
  const text = String(arg);
  return SAFE.test(text) ? text : `'${text.replaceAll("'", "'\\''")}'`;
}

/**
 * The command lines a payload's `command` stands for: a list of argvs (generic-worker), or one argv (docker-worker,
 * the reference worker), each argument quoted as a POSIX shell would need it.
 * @param {unknown} command
 * @returns {string[]}
 */
export function commandLines(command) {
  if (typeof command === "string") return [command];
  if (!Array.isArray(command) || command.length === 0) return [];
  if (command.every(Array.isArray)) return command.map((argv) => argv.map(quote).join(" "));
  return [command.map(quote).join(" ")];
}

// A button that puts `text()` on the clipboard and says so for a moment.
/**
 * @param {string} label
 * @param {() => string} text
 * @param {string} id
 */
export function copyButton(label, text, id) {
  const button = h("button", { type: "button", class: "copy", id, "aria-label": `Copy ${label}` }, "Copy");
  button.addEventListener("click", async () => {
    try {
      await navigator.clipboard.writeText(text());
      button.textContent = "Copied";
    } catch {
      button.textContent = "Copy refused";
    }
    setTimeout(() => { button.textContent = "Copy"; }, 2000);
  });
  return button;
}

const SHOWN = new Set(["command", "image", "env", "maxRunTime"]);

/**
 * @param {any} payload
 */
export function payloadView(payload) {
  if (!payload || typeof payload !== "object") return null;
  const lines = commandLines(payload.command);
  const env = payload.env && typeof payload.env === "object" ? Object.entries(payload.env) : [];
  const image = payload.image === undefined ? null
    : typeof payload.image === "string" ? payload.image : JSON.stringify(payload.image);
  const rest = Object.fromEntries(Object.entries(payload).filter(([k]) => !SHOWN.has(k)));
  return h("section", { id: "payload" }, h("h2", {}, "Payload"),
    lines.length ? h("div", { class: "command" }, h("h3", {}, "Command ", copyButton("the command",
      () => lines.join("\n"), "copy-command")), h("pre", { class: "shell", id: "payload-command",
      tabindex: "0", "aria-label": "the command" }, lines.join("\n")))
      : null,
    h("dl", { class: "facts" },
      image !== null ? [h("dt", {}, "image"), h("dd", {}, h("code", {}, image))] : null,
      payload.maxRunTime !== undefined ? [h("dt", {}, "maxRunTime"), h("dd", {}, `${payload.maxRunTime} s`)] : null,
      env.map(([k, v]) => [h("dt", {}, h("code", {}, k)), h("dd", {}, h("code", {}, String(v)))])),
    Object.keys(rest).length ? h("details", {}, h("summary", {}, "Other payload fields"),
      h("pre", { class: "json", tabindex: "0", "aria-label": "other payload fields" },
        JSON.stringify(rest, null, 2))) : null);
}
