// A log as the viewer holds it, apart from the page: its lines as they arrive (the last one may still be growing),
// the ANSI style each line starts in, each line's plain text (what search looks through), and the sections the
// log marks: GitHub Actions' `::group::` / `##[group]` … `::endgroup::` and GitLab's `section_start:` …
// `section_end:`.
import { parseLine, PLAIN } from "./ansi.js";
import { errorKind } from "./why.js";

const GROUP_START = /^(?:\x1b\[[0-9;]*m)*(?:::group::|##\[group\])(.*)$/;
const GROUP_END = /^(?:\x1b\[[0-9;]*m)*(?:::endgroup::|##\[endgroup\])/;
const SECTION_START = /^(?:\x1b\[0K)?section_start:\d+:([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?\r(?:\x1b\[0K)?(.*)$/;
const SECTION_END = /^(?:\x1b\[0K)?section_end:\d+:([A-Za-z0-9_.-]+)\r(?:\x1b\[0K)?/;
export const MAX_MATCHES = 10000;

export class LogModel {
  constructor() {
    /** @type {string[]} */
    this.raw = []; // each line as written, escapes included, without its newline
    /** @type {string[]} */
    this.plain = []; // each line's text as shown (search looks here)
    /** @type {Array<Readonly<Style>>} */
    this.styles = []; // the ANSI style each line starts in
    /** @type {number[]} */
    this.sectionOf = []; // the innermost section holding each line (an index of `sections`), or -1
    // {title, start (its header line), end (its last line, or null while open), parent, name, hasError (a line
    // inside it, at any depth, names an error: why.js)}
    /** @type {LogSection[]} */
    this.sections = [];
    /** @type {number[]} */
    this.flagged = []; // sections that found their first error line since the viewer last looked (their headers)
    /** @type {number[]} */
    this.open = []; // indexes of the sections not closed yet, innermost last
    this.pending = ""; // text after the last newline: a line still being written
    this.endStyle = PLAIN;
  }

  // Lines complete so far, and the one being written if any.
  get length() {
    return this.raw.length + (this.pending ? 1 : 0);
  }

  // Adds text (decoded); answers the index of the first line that changed.
  /**
   * @param {string} text
   */
  append(text) {
    const first = this.raw.length;
    const parts = (this.pending + text).split("\n");
    this.pending = parts.pop() ?? "";
    for (const line of parts) this.push(line.endsWith("\r") ? line.slice(0, -1) : line);
    return first;
  }

  // The line being written, as it stands (null if none): shown, but not yet part of `raw`.
  pendingLine() {
    if (!this.pending) return null;
    const { segments } = parseLine(this.pending, this.endStyle);
    return { raw: this.pending, style: this.endStyle, plain: segments.map((s) => s.text).join("") };
  }

  /**
   * @param {string} raw
   */
  push(raw) {
    const index = this.raw.length;
    const parent = this.open.length ? this.open[this.open.length - 1] : -1;
    let shown = raw;
    const start = raw.match(GROUP_START) || raw.match(SECTION_START);
    const end = !start && (raw.match(GROUP_END) || raw.match(SECTION_END));
    if (start) {
      const named = start.length > 2;
      const title = (named ? start[2] : start[1]) || (named ? start[1] : "group");
      this.sections.push({ title, start: index, end: null, parent, name: named ? start[1] : null, hasError: false });
      shown = title;
    }
    const { segments, style } = parseLine(shown, this.endStyle);
    this.raw.push(raw);
    this.styles.push(this.endStyle);
    this.plain.push(segments.map((s) => s.text).join(""));
    this.endStyle = style;
    this.sectionOf.push(parent);
    if (!start && errorKind(this.plain[index])) {
      // Its sections hold an error: flagged once each (an outer one already flagged has its own outer ones too).
      for (let s = parent; s >= 0 && !this.sections[s].hasError; s = this.sections[s].parent) {
        this.sections[s].hasError = true;
        this.flagged.push(s);
      }
    }
    if (start) this.open.push(this.sections.length - 1);
    if (end && this.open.length) {
      // GitLab names the section it ends (inner ones left open end with it); GitHub ends the innermost.
      let depth = this.open.length - 1;
      if (end.length > 1 && end[1]) {
        const named = this.open.findLastIndex((i) => this.sections[i].name === end[1]);
        if (named >= 0) depth = named;
      }
      for (const i of this.open.splice(depth)) this.sections[i].end = index;
    }
  }

  // The text shown for a line (a section's header shows its title only).
  /**
   * @param {number} index
   */
  shownRaw(index) {
    const section = this.headerOf(index);
    return section === null ? this.raw[index] : this.sections[section].title;
  }

  // The section a line is the header of, or null. Sections are in the order of their headers: a binary search.
  /**
   * @param {number} index
   */
  headerOf(index) {
    let lo = 0;
    let hi = this.sections.length - 1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      const start = this.sections[mid].start;
      if (start === index) return mid;
      if (start < index) lo = mid + 1;
      else hi = mid - 1;
    }
    return null;
  }

  // Whether a line is inside a collapsed section (a header is inside its parent, not itself).
  /**
   * @param {number} index
   * @param {ReadonlySet<number>} collapsed
   */
  hidden(index, collapsed) {
    if (collapsed.size === 0) return false;
    for (let s = this.sectionOf[index]; s >= 0; s = this.sections[s].parent) if (collapsed.has(s)) return true;
    return false;
  }

  // Every match of `query` (case-insensitive), in order: [{line, start, end}], at most MAX_MATCHES.
  /**
   * @param {string} query
   */
  search(query) {
    if (!query) return [];
    const needle = query.toLowerCase();
    const found = [];
    const lines = this.plain.length;
    const pending = this.pendingLine();
    for (let i = 0; i < lines + (pending ? 1 : 0) && found.length < MAX_MATCHES; i += 1) {
      const text = (i < lines || !pending ? this.plain[i] : pending.plain).toLowerCase();
      for (let at = text.indexOf(needle); at >= 0 && found.length < MAX_MATCHES; at = text.indexOf(needle, at + needle.length)) {
        found.push({ line: i, start: at, end: at + needle.length });
      }
    }
    return found;
  }
}
