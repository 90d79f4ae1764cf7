// A task group's dependency graph as a picture: tasks in layers (a task one layer below the deepest of its
// dependencies in the group), each layer a band wrapped into rows, each task a square in its state's colour, drawn
// on a canvas so that 10,000 tasks stay cheap. Pointing at a task names it and draws its edges (what it depends on,
// what depends on it); a click opens it. Small graphs show every edge. The group's table stays the accessible
// form of the same facts; the canvas carries a summary for assistive technology.
import { h } from "./dom.js";

/** @type {Record<string, string>} */
const COLOURS = {
  unscheduled: "#bdbdbd", pending: "#757575", running: "#1976d2", completed: "#2e7d32", failed: "#c62828",
  exception: "#b45309",
};
const ALL_EDGES = 400; // up to this many edges, all are drawn

// Layers of the tasks (entries of the group model): {layerOf: Map taskId -> layer, layers: [[entries]]}.
/**
 * @param {Map<string, GroupEntry>} tasks
 * @returns {{layerOf: Map<string, number>, layers: GroupEntry[][]}}
 */
export function layers(tasks) {
  /** @type {Map<string, number>} */
  const layerOf = new Map();
  const visiting = new Set();
  /**
   * @param {GroupEntry} entry
   * @returns {number}
   */
  function depth(entry) {
    const id = entry.status.taskId;
    const known = layerOf.get(id);
    if (known !== undefined) return known;
    if (visiting.has(id)) return 0; // a cycle (the queue never makes one): cut here
    visiting.add(id);
    let deepest = -1;
    for (const dep of entry.task.dependencies || []) {
      const found = dep !== id ? tasks.get(dep) : null;
      if (found) deepest = Math.max(deepest, depth(found));
    }
    visiting.delete(id);
    layerOf.set(id, deepest + 1);
    return deepest + 1;
  }
  /** @type {GroupEntry[][]} */
  const bands = [];
  for (const entry of tasks.values()) {
    const layer = depth(entry);
    (bands[layer] ||= []).push(entry);
  }
  return { layerOf, layers: bands.map((band) => band || []) };
}

export class GroupGraph {
  /**
   * @param {(taskId: string) => void} onOpen
   */
  constructor(onOpen) {
    this.onOpen = onOpen;
    this.size = 16; // px of a task's square, set by each layout
    this.canvas = h("canvas", { role: "img", "aria-label": "the group's dependency graph", tabindex: "-1" });
    this.tip = h("div", { class: "graph-tip", hidden: true, role: "status" });
    this.legend = h("p", { class: "graph-legend quiet" });
    this.element = h("div", { class: "graph", id: "group-graph" }, this.legend, h("div", { class: "graph-area",
      tabindex: "0", role: "region", "aria-label": "dependency graph (scrolls sideways)" }, this.canvas, this.tip));
    /** @type {Map<string, Position>} */
    this.positions = new Map(); // taskId -> {x, y}
    /** @type {GroupEntry | null} */
    this.hover = null;
    /** @type {Map<string, GroupEntry>} */
    this.tasks = new Map(); // as last drawn
    this.edges = 0;
    this.canvas.addEventListener("mousemove", (event) => this.pointed(event));
    this.canvas.addEventListener("mouseleave", () => this.point(null));
    this.canvas.addEventListener("click", (event) => {
      const entry = this.at(event);
      if (entry) this.onOpen(entry.status.taskId);
    });
    this.canvas.positionOf = (taskId) => this.positions.get(taskId) || null; // for tests: where a task is drawn
  }

  // Lays the tasks out (a Map taskId -> entry) and draws them.
  /**
   * @param {Map<string, GroupEntry>} tasks
   */
  draw(tasks) {
    this.tasks = tasks;
    const { layers: bands } = layers(tasks);
    const width = Math.max(300, Math.min(1160, this.element.clientWidth || 1160));
    const count = tasks.size;
    const size = count > 2000 ? 6 : count > 300 ? 10 : 16;
    const gap = size > 6 ? 4 : 2;
    const perRow = Math.max(1, Math.floor((width - 16) / (size + gap)));
    const bandGap = size * 2;
    this.size = size;
    this.positions.clear();
    let y = 8;
    /** @type {Map<string, number>} */
    let previous = new Map(); // order of the previous band's tasks, to put a task under its dependencies
    /**
     * @param {GroupEntry} entry
     */
    const orderOf = (entry) => {
      const deps = (entry.task.dependencies || []).map((d) => previous.get(d)).filter((v) => v !== undefined);
      return deps.length ? deps.reduce((a, b) => a + b, 0) / deps.length : Number.MAX_SAFE_INTEGER;
    };
    for (const band of bands) {
      const sorted = band.map((e) => /** @type {[number, GroupEntry]} */ ([orderOf(e), e])).sort((a, b) => a[0] - b[0]
        || (a[1].task.metadata.name || "").localeCompare(b[1].task.metadata.name || "")).map(([, e]) => e);
      const placed = new Map();
      sorted.forEach((entry, i) => {
        const x = 8 + (i % perRow) * (size + gap);
        const row = Math.floor(i / perRow);
        this.positions.set(entry.status.taskId, { x, y: y + row * (size + gap) });
        placed.set(entry.status.taskId, i);
      });
      previous = placed;
      y += Math.ceil(sorted.length / perRow) * (size + gap) + bandGap;
    }
    const ratio = window.devicePixelRatio || 1;
    this.canvas.width = width * ratio;
    this.canvas.height = y * ratio;
    this.canvas.style.width = `${width}px`;
    this.canvas.style.height = `${y}px`;
    this.canvas.dataset.layers = String(bands.length);
    this.canvas.dataset.tasks = String(count);
    this.edges = [...tasks.values()].reduce((n, e) => n + (e.task.dependencies || []).filter((d) => tasks.has(d)).length, 0);
    this.legend.textContent = `${count} task${count === 1 ? "" : "s"} in ${bands.length} layer${bands.length === 1
      ? "" : "s"}, each below the deepest of its dependencies; ${this.edges} dependenc${this.edges === 1 ? "y" : "ies"}`
      + ` in the group${this.edges > ALL_EDGES ? " (point at a task to see its own)" : ""}. Click a task to open it.`;
    this.canvas.setAttribute("aria-label", `Dependency graph: ${this.legend.textContent} The table below lists the `
      + "same tasks.");
    this.paint();
  }

  paint() {
    const ctx = /** @type {CanvasRenderingContext2D} */ (this.canvas.getContext("2d"));
    const ratio = window.devicePixelRatio || 1;
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, this.canvas.width, this.canvas.height);
    const half = this.size / 2;
    /**
     * @param {string} from
     * @param {string} to
     * @param {string} colour
     */
    const edge = (from, to, colour) => {
      const a = this.positions.get(from);
      const b = this.positions.get(to);
      if (!a || !b) return;
      ctx.strokeStyle = colour;
      ctx.beginPath();
      ctx.moveTo(a.x + half, a.y + this.size);
      ctx.lineTo(b.x + half, b.y);
      ctx.stroke();
    };
    ctx.lineWidth = 1;
    if (this.edges <= ALL_EDGES) {
      for (const entry of this.tasks.values()) {
        for (const dep of entry.task.dependencies || []) edge(dep, entry.status.taskId, "rgba(80, 90, 100, 0.35)");
      }
    }
    if (this.hover) {
      const id = this.hover.status.taskId;
      ctx.lineWidth = 2;
      for (const dep of this.hover.task.dependencies || []) edge(dep, id, "#0b57d0");
      for (const other of this.tasks.values()) {
        if ((other.task.dependencies || []).includes(id)) edge(id, other.status.taskId, "#7b1fa2");
      }
    }
    for (const entry of this.tasks.values()) {
      const p = this.positions.get(entry.status.taskId);
      if (!p) continue;
      ctx.fillStyle = COLOURS[entry.status.state] || "#000";
      ctx.fillRect(p.x, p.y, this.size, this.size);
    }
    if (this.hover) {
      const p = this.positions.get(this.hover.status.taskId);
      if (p) {
        ctx.strokeStyle = "#000";
        ctx.lineWidth = 2;
        ctx.strokeRect(p.x - 1, p.y - 1, this.size + 2, this.size + 2);
      }
    }
  }

  /**
   * @param {MouseEvent} event
   * @returns {GroupEntry | null}
   */
  at(event) {
    const box = this.canvas.getBoundingClientRect();
    const x = event.clientX - box.left;
    const y = event.clientY - box.top;
    for (const [id, p] of this.positions) {
      if (x >= p.x && x < p.x + this.size && y >= p.y && y < p.y + this.size) return this.tasks.get(id) ?? null;
    }
    return null;
  }

  /**
   * @param {MouseEvent} event
   */
  pointed(event) {
    this.point(this.at(event), event);
  }

  /**
   * @param {GroupEntry | null} entry
   * @param {MouseEvent} [event]
   */
  point(entry, event) {
    if (entry === this.hover) return;
    this.hover = entry;
    this.canvas.style.cursor = entry ? "pointer" : "default";
    if (entry && event) {
      const box = this.canvas.getBoundingClientRect();
      this.tip.textContent = `${entry.task.metadata.name || entry.status.taskId}: ${entry.status.state}`;
      this.tip.style.left = `${Math.min(event.clientX - box.left + 12, box.width - 200)}px`;
      this.tip.style.top = `${event.clientY - box.top + 12}px`;
    }
    this.tip.hidden = !entry;
    this.paint();
  }
}
