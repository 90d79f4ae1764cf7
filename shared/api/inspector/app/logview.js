// The log viewer: a LogModel on the page. Lines are drawn in blocks of BLOCK lines, each only when it comes near
// the visible part (an IntersectionObserver), so a finished log of 100,000 lines costs what is on screen; a block
// drawn once is skipped by layout while off screen (content-visibility). Line numbers link to a line or a range
// (click, shift-click; `#L12-L20` in the address), search highlights every match and steps through them, the
// sections a log marks fold, timestamps at the start of a line show the local time on hover, and following the
// end stops when the reader scrolls up and resumes when they come back to the bottom.
import { decorate, parseLine, PLAIN } from "./ansi.js";
import { h } from "./dom.js";
import { LogModel, MAX_MATCHES } from "./logmodel.js";

const BLOCK = 500;
const LINE_HEIGHT = 18; // px, as inspector.css sets for .log-lines: the height of a block not drawn yet
const TIMESTAMP = /^(\[[^\]\s]{1,40} )?(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d))/;
const WRAP_KEY = "tc-inspector-log-wrap";

// `#L12`, `#L12-L20` or `#L12-20` (from the end of an address): {from, to}, or null.
/**
 * @param {string | undefined} text
 * @returns {LineRange | null}
 */
export function parseLineAnchor(text) {
  const m = /#L(\d+)(?:-L?(\d+))?$/.exec(text || "");
  if (!m) return null;
  const a = Number(m[1]);
  const b = m[2] ? Number(m[2]) : a;
  return a >= 1 ? { from: Math.min(a, b), to: Math.max(a, b) } : null;
}

/**
 * @param {LineRange} range
 */
export function lineAnchor(range) {
  return range.from === range.to ? `#L${range.from}` : `#L${range.from}-L${range.to}`;
}

export class LogViewer {
  // `base`: the view's address without a line anchor; `fileName`: what a download is called.
  /**
   * @param {{base: string, fileName: string}} where
   */
  constructor({ base, fileName }) {
    this.model = new LogModel();
    this.base = base;
    this.fileName = fileName;
    /** @type {Array<{el: HTMLElement, drawn: boolean}>} */
    this.blocks = []; // {el, drawn}
    /** @type {Set<number>} */
    this.collapsed = new Set(); // sections folded
    /** @type {Set<number>} */
    this.touched = new Set(); // sections the reader folded or unfolded (left as they are when they close)
    /** @type {LineRange | null} */
    this.selection = null; // {from, to}, 1-based line numbers
    /** @type {LogMatch[]} */
    this.matches = [];
    /** @type {Map<number, number[]>} */
    this.matchesByLine = new Map();
    this.current = -1; // the match stepped to
    this.query = "";
    this.follow = true;

    this.followBox = h("input", { type: "checkbox", id: "follow", checked: true, onchange: () => {
      this.follow = this.followBox.checked;
      if (this.follow) this.toEnd();
    } });
    const wrapped = localStorage.getItem(WRAP_KEY) !== "off";
    this.wrapBox = h("input", { type: "checkbox", id: "wrap", checked: wrapped, onchange: () => {
      this.lines.classList.toggle("nowrap", !this.wrapBox.checked);
      localStorage.setItem(WRAP_KEY, this.wrapBox.checked ? "on" : "off");
    } });
    this.searchBox = h("input", { type: "search", id: "log-search", placeholder: "Search the log", autocomplete: "off",
      "aria-describedby": "log-search-count", onkeydown: (/** @type {KeyboardEvent} */ event) => {
        if (event.key === "Enter") {
          event.preventDefault();
          this.search(this.searchBox.value);
          this.step(event.shiftKey ? -1 : 1);
        } else if (event.key === "Escape") {
          this.searchBox.value = "";
          this.search("");
        }
      }, oninput: () => {
        clearTimeout(this.searchTimer);
        this.searchTimer = setTimeout(() => {
          if (this.searchBox.value !== this.query) this.search(this.searchBox.value);
        }, 150);
      } });
    this.counter = h("span", { id: "log-search-count", class: "quiet", "aria-live": "polite" });
    this.lines = h("div", { class: `log-lines${wrapped ? "" : " nowrap"}` });
    this.scroller = h("div", { class: "log", id: "log", tabindex: "0", role: "region", "aria-label": "log",
      onscroll: () => this.scrolled(), onclick: (/** @type {MouseEvent} */ event) => this.clicked(event) }, this.lines);
    this.toolbar = h("div", { class: "log-toolbar" },
      h("span", { class: "log-search" },
        h("label", { for: "log-search", class: "visually-hidden" }, "Search the log"), this.searchBox,
        h("button", { type: "button", id: "search-prev", "aria-label": "previous match", onclick: () => this.step(-1) }, "↑"),
        h("button", { type: "button", id: "search-next", "aria-label": "next match", onclick: () => this.step(1) }, "↓"),
        this.counter),
      h("label", {}, this.followBox, " follow the end"),
      h("label", {}, this.wrapBox, " wrap lines"),
      h("button", { type: "button", id: "download-log", onclick: () => this.download() }, "Download"));
    this.observer = new IntersectionObserver((entries) => {
      for (const entry of entries) if (entry.isIntersecting) this.draw(Number(/** @type {HTMLElement} */ (entry.target).dataset.block));
    }, { root: this.scroller, rootMargin: "1500px 0px" });
  }

  // Text read from the log (decoded); the page is updated, and follows the end if it should.
  /**
   * @param {string} text
   */
  append(text) {
    if (!text) return;
    const first = this.model.append(text);
    this.refreshFrom(first);
    for (const s of this.model.flagged.splice(0)) this.redrawLine(this.model.sections[s].start); // their headers
    if (this.follow) this.foldClosed();
    if (this.query) this.search(this.query);
    if (this.follow) this.toEnd();
  }

  /**
   * @param {number} line
   */
  refreshFrom(line) {
    const total = this.model.length;
    const needed = Math.ceil(total / BLOCK);
    for (let b = this.blocks.length; b < needed; b += 1) {
      const el = h("div", { class: "log-block", dataset: { block: b } });
      this.blocks.push({ el, drawn: false });
      this.lines.append(el);
      this.observer.observe(el);
    }
    for (let b = Math.floor(line / BLOCK); b < needed; b += 1) {
      const block = this.blocks[b];
      if (block.drawn) this.redraw(b, Math.max(line, b * BLOCK));
      else block.el.style.height = `${this.shownLines(b) * LINE_HEIGHT}px`;
    }
  }

  /**
   * @param {number} b
   */
  shownLines(b) {
    let count = 0;
    const end = Math.min(this.model.length, (b + 1) * BLOCK);
    for (let i = b * BLOCK; i < end; i += 1) if (!this.model.hidden(i, this.collapsed)) count += 1;
    return count;
  }

  /**
   * @param {number} b
   */
  draw(b) {
    const block = this.blocks[b];
    if (!block || block.drawn) return;
    block.drawn = true;
    this.observer.unobserve(block.el);
    block.el.style.height = "";
    this.redraw(b, b * BLOCK);
  }

  // Lines of block `b` from line `from` on, drawn again (what was there from that line is replaced).
  /**
   * @param {number} b
   * @param {number} from
   */
  redraw(b, from) {
    const { el } = this.blocks[b];
    const start = b * BLOCK;
    while (el.childElementCount > from - start) el.lastElementChild?.remove();
    const end = Math.min(this.model.length, start + BLOCK);
    const lines = [];
    for (let i = from; i < end; i += 1) lines.push(this.lineElement(i));
    el.append(...lines);
  }

  /**
   * @param {number} i
   */
  redrawLine(i) {
    const block = this.blocks[Math.floor(i / BLOCK)];
    if (!block || !block.drawn) return;
    const old = block.el.children[i - Math.floor(i / BLOCK) * BLOCK];
    if (old) old.replaceWith(this.lineElement(i));
  }

  /**
   * @param {number} i
   */
  lineElement(i) {
    const model = this.model;
    const complete = i < model.raw.length;
    const pending = complete ? null : /** @type {{raw: string, style: any, plain: string}} */ (model.pendingLine());
    const n = i + 1;
    const number = h("a", { class: "ln", href: `${this.base}#L${n}`, tabindex: "-1", dataset: { n } }, String(n));
    const section = complete ? model.headerOf(i) : null;
    const raw = section !== null ? model.sections[section].title : pending ? pending.raw : model.raw[i];
    const text = this.lineText(i, raw, pending ? pending.style : model.styles[i], pending ? pending.plain : model.plain[i]);
    const classes = ["line"];
    if (this.selection && n >= this.selection.from && n <= this.selection.to) classes.push("sel");
    if (this.matchesByLine.has(i)) classes.push("has-hit");
    const line = h("div", { class: classes.join(" "), dataset: { n }, hidden: model.hidden(i, this.collapsed) },
      number);
    if (section !== null) {
      const s = model.sections[section];
      const open = !this.collapsed.has(section);
      const size = s.end === null ? "running" : `${s.end - s.start} lines`;
      line.classList.add("section-header");
      if (s.hasError) line.classList.add("section-error");
      line.append(h("button", { type: "button", class: "fold", "aria-expanded": String(open),
        dataset: { section } }, text, h("span", { class: "quiet" }, ` (${size})`),
      s.hasError ? h("span", { class: "section-flag" }, " error inside") : ""));
    } else {
      line.append(text);
    }
    return line;
  }

  // A line's text: its ANSI segments, with the timestamp it starts with and the search's matches marked.
  /**
   * @param {number} i
   * @param {string} raw
   * @param {Readonly<Style>} style
   * @param {string} plain
   */
  lineText(i, raw, style, plain) {
    const { segments } = parseLine(raw, style);
    const ranges = [];
    const ts = TIMESTAMP.exec(plain);
    if (ts) {
      const at = ts[1] ? ts[1].length : 0;
      const date = new Date(ts[2]);
      if (!Number.isNaN(date.getTime())) {
        ranges.push({ start: at, end: at + ts[2].length, cls: "ts", title: date.toLocaleString() });
      }
    }
    for (const index of this.matchesByLine.get(i) || []) {
      const m = this.matches[index];
      ranges.push({ start: m.start, end: m.end, cls: index === this.current ? "hit current" : "hit", match: index });
    }
    const out = h("span", { class: "lt" });
    if (ranges.length === 0) {
      for (const s of segments) out.append(s.style === PLAIN ? s.text : decorate(h("span", {}, s.text), s.style));
      return out;
    }
    // Cut the segments at every range's edges; each piece keeps its segment's style and gets its ranges' marks.
    let offset = 0;
    for (const s of segments) {
      const from = offset;
      const to = offset + s.text.length;
      offset = to;
      const cuts = new Set([from, to]);
      for (const r of ranges) for (const edge of [r.start, r.end]) if (edge > from && edge < to) cuts.add(edge);
      const edges = [...cuts].sort((x, y) => x - y);
      for (let k = 0; k < edges.length - 1; k += 1) {
        const piece = decorate(h("span", {}, s.text.slice(edges[k] - from, edges[k + 1] - from)), s.style);
        for (const r of ranges) {
          if (r.start <= edges[k] && r.end >= edges[k + 1]) {
            piece.classList.add(...r.cls.split(" "));
            if (r.title) piece.title = r.title;
            if (r.match !== undefined) piece.dataset.match = String(r.match);
          }
        }
        out.append(piece);
      }
    }
    return out;
  }

  // Clicks on a line number (select a line, shift: a range) and on a section's header (fold, unfold).
  /**
   * @param {MouseEvent} event
   */
  clicked(event) {
    const target = /** @type {Element} */ (event.target);
    const fold = /** @type {HTMLElement | null} */ (target.closest("button.fold"));
    if (fold) {
      this.toggle(Number(fold.dataset.section));
      return;
    }
    const number = /** @type {HTMLElement | null} */ (target.closest("a.ln"));
    if (!number) return;
    event.preventDefault();
    const n = Number(number.dataset.n);
    const range = event.shiftKey && this.selection
      ? { from: Math.min(this.selection.from, n), to: Math.max(this.selection.to, n) } : { from: n, to: n };
    this.select(range, { scroll: false });
    history.replaceState(null, "", `${this.base}${lineAnchor(range)}`);
  }

  // Marks lines `range` ({from, to}, 1-based) and, with `scroll`, brings the first into view (unfolding it).
  /**
   * @param {LineRange} range
   * @param {{scroll?: boolean}} [options]
   */
  select(range, { scroll = true } = {}) {
    const old = this.selection;
    this.selection = range;
    const redraw = new Set();
    for (const r of [old, range]) {
      if (!r) continue;
      for (let n = r.from; n <= Math.min(r.to, r.from + 2 * BLOCK, this.model.length); n += 1) redraw.add(n - 1);
    }
    for (const i of redraw) this.redrawLine(i);
    if (scroll && range.from <= this.model.length) {
      this.stopFollowing();
      this.reveal(range.from - 1);
    }
  }

  // Whether line `range.from` has arrived (a link to a line of a log still loading waits for it).
  /**
   * @param {LineRange} range
   */
  has(range) {
    return range.from <= this.model.length;
  }

  // Line i on screen: its sections unfolded, its block drawn, scrolled to the middle.
  /**
   * @param {number} i
   */
  reveal(i) {
    let unfolded = false;
    for (let s = this.model.sectionOf[i]; s !== undefined && s >= 0; s = this.model.sections[s].parent) {
      if (this.collapsed.delete(s)) unfolded = true;
    }
    if (unfolded) this.refreshFrom(0);
    const b = Math.floor(i / BLOCK);
    this.draw(b);
    const line = this.blocks[b].el.children[i - b * BLOCK];
    if (line) line.scrollIntoView({ block: "center" });
  }

  /**
   * @param {number} section
   */
  toggle(section) {
    if (this.collapsed.has(section)) this.collapsed.delete(section);
    else this.collapsed.add(section);
    this.touched.add(section);
    const s = this.model.sections[section];
    this.refreshSpan(s.start, s.end === null ? this.model.length - 1 : s.end);
  }

  // Lines first..last drawn again with their sections' state (header included), blocks not drawn resized.
  /**
   * @param {number} first
   * @param {number} last
   */
  refreshSpan(first, last) {
    for (let b = Math.floor(first / BLOCK); b <= Math.floor(last / BLOCK) && b < this.blocks.length; b += 1) {
      if (this.blocks[b].drawn) this.redraw(b, Math.max(first, b * BLOCK));
      else this.blocks[b].el.style.height = `${this.shownLines(b) * LINE_HEIGHT}px`;
    }
  }

  // Sections that closed since the last look are folded, unless the reader touched them, a link points inside, or
  // they hold an error (marked on their header: a failure is not hidden in a folded section).
  foldClosed() {
    this.model.sections.forEach((s, index) => {
      if (s.end !== null && !s.folded && !this.touched.has(index)) {
        s.folded = true;
        const linked = this.selection && this.selection.from - 1 > s.start && this.selection.from - 1 <= s.end;
        if (!linked && !s.hasError && s.end - s.start > 1) {
          this.collapsed.add(index);
          this.refreshSpan(s.start, s.end);
        }
      }
    });
  }

  // Every match of `query` marked; the match stepped to stays the current one while the query is the same.
  /**
   * @param {string} query
   */
  search(query) {
    const previous = this.current >= 0 ? this.matches[this.current] : null;
    const changed = query !== this.query;
    this.query = query;
    this.matches = this.model.search(query);
    this.matchesByLine = new Map();
    this.matches.forEach((m, index) => {
      const list = this.matchesByLine.get(m.line);
      if (list) list.push(index);
      else this.matchesByLine.set(m.line, [index]);
    });
    if (previous && !changed) {
      this.current = this.matches.findIndex((m) => m.line === previous.line && m.start === previous.start);
    } else {
      this.current = -1;
    }
    this.blocks.forEach((block, b) => {
      if (block.drawn) this.redraw(b, b * BLOCK);
    });
    this.count();
  }

  count() {
    const total = this.matches.length;
    const more = total >= MAX_MATCHES ? "+" : "";
    this.counter.textContent = !this.query ? "" : total === 0 ? "no match"
      : `${this.current >= 0 ? `${this.current + 1} of ` : ""}${total}${more} match${total === 1 ? "" : "es"}`;
  }

  // The next (1) or previous (-1) match, from the one stepped to or from the top of the screen.
  /**
   * @param {1 | -1} direction
   */
  step(direction) {
    if (this.query !== this.searchBox.value) this.search(this.searchBox.value);
    if (this.matches.length === 0) return;
    const old = this.current;
    if (old < 0) {
      const top = this.topLine();
      const after = this.matches.findIndex((m) => m.line >= top);
      this.current = direction > 0 ? (after < 0 ? 0 : after) : (after <= 0 ? this.matches.length - 1 : after - 1);
    } else {
      this.current = (old + direction + this.matches.length) % this.matches.length;
    }
    const line = this.matches[this.current].line;
    if (old >= 0) this.redrawLine(this.matches[old].line);
    this.redrawLine(line);
    this.stopFollowing();
    this.reveal(line);
    this.count();
  }

  // The first line on screen (estimated from the scroll position where blocks are not drawn).
  topLine() {
    const top = this.scroller.scrollTop;
    for (let b = 0; b < this.blocks.length; b += 1) {
      const el = this.blocks[b].el;
      if (el.offsetTop + el.offsetHeight > top) {
        for (const line of /** @type {HTMLCollectionOf<HTMLElement>} */ (el.children)) {
          if (line.offsetTop + line.offsetHeight > top) return Number(line.dataset.n) - 1;
        }
        return b * BLOCK;
      }
    }
    return 0;
  }

  toEnd() {
    const last = this.blocks.length - 1;
    if (last < 0) return;
    this.draw(last);
    if (last > 0) this.draw(last - 1);
    this.scroller.scrollTop = this.scroller.scrollHeight;
  }

  stopFollowing() {
    this.follow = false;
    this.followBox.checked = false;
  }

  // The reader scrolled: up stops following the end, back down to the bottom resumes it. (Scrolls the viewer
  // makes itself end at the bottom when following, or come after stopFollowing.)
  scrolled() {
    const atBottom = this.scroller.scrollHeight - this.scroller.scrollTop - this.scroller.clientHeight < 4;
    if (atBottom !== this.follow) {
      this.follow = atBottom;
      this.followBox.checked = atBottom;
    }
  }

  download() {
    const pending = this.model.pending;
    const blob = new Blob([this.model.raw.join("\n"), this.model.raw.length ? "\n" : "", pending], { type: "text/plain" });
    const href = URL.createObjectURL(blob);
    const link = h("a", { href, download: this.fileName });
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(href), 10000);
  }

  // The log is whole: sections close as they are, and following the end no longer matters once read.
  finish() {
    this.finished = true;
    this.foldClosed();
  }

  stop() {
    this.observer.disconnect();
    clearTimeout(this.searchTimer);
  }

}
