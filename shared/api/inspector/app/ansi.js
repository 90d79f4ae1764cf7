// ANSI escape sequences in logs, as a terminal shows them: SGR colours (16, 256 and 24-bit) and styles (bold, dim,
// italic, underline, inverse, strike), carried from one line to the next; every other escape (cursor moves, erase,
// OSC titles and hyperlinks) removed; a carriage return inside a line keeps what was written after it (progress
// bars), as the terminal's last frame.

// CSI (ESC [ params intermediates final), OSC (ESC ] ... BEL or ST), and two-byte escapes.
const ESCAPE = /\x1b(?:\[([0-?]*)[ -/]*([@-~])|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])?/g;
const CONTROL = /[\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f]/g; // what is left of C0 controls (tab kept)
const HAS_CONTROL = /[\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f]/;

/** @type {Readonly<Style>} */
export const PLAIN = Object.freeze({});

// A style is an immutable object: lines and segments share them, and "no style" is PLAIN.
/**
 * @param {Readonly<Style>} style
 * @param {Record<string, boolean | number | string | undefined>} changes
 * @returns {Readonly<Style>}
 */
function styled(style, changes) {
  /** @type {Record<string, unknown>} */
  const next = { ...style, ...changes };
  for (const key of Object.keys(next)) if (next[key] === undefined || next[key] === false) delete next[key];
  return Object.keys(next).length === 0 ? PLAIN : Object.freeze(/** @type {Style} */ (next));
}

const CUBE = [0, 95, 135, 175, 215, 255];

// An index of the 256-colour palette: 0-15 stay indexes (the page's palette classes), the rest become RGB.
/**
 * @param {number} n
 * @returns {number | string}
 */
function palette(n) {
  if (n < 16) return n;
  if (n < 232) {
    const i = n - 16;
    return `rgb(${CUBE[Math.floor(i / 36)]},${CUBE[Math.floor(i / 6) % 6]},${CUBE[i % 6]})`;
  }
  const grey = 8 + 10 * (n - 232);
  return `rgb(${grey},${grey},${grey})`;
}

// The style after an SGR sequence's parameters.
/**
 * @param {Readonly<Style>} style
 * @param {string} params
 * @returns {Readonly<Style>}
 */
export function sgr(style, params) {
  const codes = params === "" ? [0] : params.split(/[;:]/).map((p) => (p === "" ? 0 : Number(p)));
  let s = style;
  for (let i = 0; i < codes.length; i += 1) {
    const c = codes[i];
    if (c === 0) s = PLAIN;
    else if (c === 1) s = styled(s, { bold: true });
    else if (c === 2) s = styled(s, { dim: true });
    else if (c === 3) s = styled(s, { italic: true });
    else if (c === 4) s = styled(s, { underline: true });
    else if (c === 7) s = styled(s, { inverse: true });
    else if (c === 9) s = styled(s, { strike: true });
    else if (c === 22) s = styled(s, { bold: undefined, dim: undefined });
    else if (c === 23) s = styled(s, { italic: undefined });
    else if (c === 24) s = styled(s, { underline: undefined });
    else if (c === 27) s = styled(s, { inverse: undefined });
    else if (c === 29) s = styled(s, { strike: undefined });
    else if (c >= 30 && c <= 37) s = styled(s, { fg: c - 30 });
    else if (c >= 90 && c <= 97) s = styled(s, { fg: c - 90 + 8 });
    else if (c === 39) s = styled(s, { fg: undefined });
    else if (c >= 40 && c <= 47) s = styled(s, { bg: c - 40 });
    else if (c >= 100 && c <= 107) s = styled(s, { bg: c - 100 + 8 });
    else if (c === 49) s = styled(s, { bg: undefined });
    else if (c === 38 || c === 48) {
      const key = c === 38 ? "fg" : "bg";
      if (codes[i + 1] === 5 && i + 2 < codes.length) {
        s = styled(s, { [key]: palette(Math.min(255, codes[i + 2])) });
        i += 2;
      } else if (codes[i + 1] === 2 && i + 4 < codes.length) {
        const [r, g, b] = codes.slice(i + 2, i + 5).map((v) => Math.min(255, v));
        s = styled(s, { [key]: `rgb(${r},${g},${b})` });
        i += 4;
      } else {
        break; // malformed: ignore the rest, as terminals do
      }
    }
  }
  return s;
}

// One line (without its newline) from the style it starts in: its segments [{text, style}] and the style it
// ends in. Lines without escapes or carriage returns are the common case and cost one test.
/**
 * @param {string} raw
 * @param {Readonly<Style>} [style]
 * @returns {{segments: Array<{text: string, style: Readonly<Style>}>, style: Readonly<Style>}}
 */
export function parseLine(raw, style = PLAIN) {
  if (!raw.includes("\x1b") && !raw.includes("\r")) {
    const text = HAS_CONTROL.test(raw) ? raw.replace(CONTROL, "") : raw;
    return { segments: text ? [{ text, style }] : [], style };
  }
  let segments = [];
  let current = style;
  const parts = raw.split("\r");
  for (let p = 0; p < parts.length; p += 1) {
    const part = parts[p];
    // Text after a carriage return overwrites the line: a later non-empty part replaces what came before.
    if (p > 0 && part !== "") segments = [];
    let last = 0;
    ESCAPE.lastIndex = 0;
    for (let m = ESCAPE.exec(part); m !== null; m = ESCAPE.exec(part)) {
      if (m.index > last) segments.push({ text: part.slice(last, m.index).replace(CONTROL, ""), style: current });
      if (m[2] === "m") current = sgr(current, m[1]);
      last = ESCAPE.lastIndex;
    }
    if (last < part.length) segments.push({ text: part.slice(last).replace(CONTROL, ""), style: current });
  }
  return { segments: segments.filter((s) => s.text !== ""), style: current };
}

// A segment's classes and inline colours (set through CSSOM, which the page's CSP allows).
/**
 * @template {HTMLElement} N
 * @param {N} node
 * @param {Readonly<Style>} style
 * @returns {N}
 */
export function decorate(node, style) {
  if (style === PLAIN) return node;
  const classes = [];
  for (const flag of /** @type {const} */ (["bold", "dim", "italic", "underline", "strike", "inverse"])) if (style[flag]) classes.push(`a-${flag}`);
  if (typeof style.fg === "number") classes.push(`a-f${style.fg}`);
  else if (style.fg) node.style.color = style.fg;
  if (typeof style.bg === "number") classes.push(`a-b${style.bg}`);
  else if (style.bg) node.style.backgroundColor = style.bg;
  if (classes.length) node.className = classes.join(" ");
  return node;
}
