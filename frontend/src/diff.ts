// Unified diffs (GET /v1/changes/diff) read into lines, and drawn inline or
// side by side. The text is the guest's: it only ever becomes text nodes.

import { h } from "./dom";

export type LineKind = "ctx" | "add" | "del" | "hunk" | "meta" | "note";

export interface DiffLine {
  kind: LineKind;
  text: string;
  /** old and new are the line's numbers in the old and the new file. */
  old?: number;
  new?: number;
}

export interface Diff {
  lines: DiffLine[];
  /** hunks counts the @@ sections: none means the text is a summary, not a diff. */
  hunks: number;
  /** cut says lines were left out past the bound. */
  cut: boolean;
}

const HUNK = /^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@/;

/**
 * parseDiff reads a unified diff of one or more files, keeping at most max
 * lines. Within a hunk the line counts in its @@ header decide what is
 * content, so a removed line that starts with "--" is not taken for the
 * next file's header.
 */
export function parseDiff(text: string, max = 5000): Diff {
  const out: DiffLine[] = [];
  let hunks = 0;
  let oldLeft = 0;
  let newLeft = 0;
  let oldNo = 0;
  let newNo = 0;
  let cut = false;
  const src = text.split("\n");
  if (src.length && src[src.length - 1] === "") src.pop();
  for (const raw of src) {
    if (out.length >= max) {
      cut = true;
      break;
    }
    const line = raw.endsWith("\r") ? raw.slice(0, -1) : raw;
    if (oldLeft > 0 || newLeft > 0) {
      const c = line[0];
      if (c === "+" && newLeft > 0) {
        out.push({ kind: "add", text: line.slice(1), new: newNo++ });
        newLeft--;
        continue;
      }
      if (c === "-" && oldLeft > 0) {
        out.push({ kind: "del", text: line.slice(1), old: oldNo++ });
        oldLeft--;
        continue;
      }
      if ((c === " " || line === "") && oldLeft > 0 && newLeft > 0) {
        out.push({ kind: "ctx", text: line.slice(1), old: oldNo++, new: newNo++ });
        oldLeft--;
        newLeft--;
        continue;
      }
      if (c === "\\") {
        out.push({ kind: "note", text: line });
        continue;
      }
      // A hunk shorter than its header said: read on as headers.
      oldLeft = newLeft = 0;
    }
    const m = HUNK.exec(line);
    if (m) {
      hunks++;
      oldNo = Number(m[1]);
      newNo = Number(m[3]);
      oldLeft = m[2] === undefined ? 1 : Number(m[2]);
      newLeft = m[4] === undefined ? 1 : Number(m[4]);
      out.push({ kind: "hunk", text: line });
    } else if (line.startsWith("\\")) {
      out.push({ kind: "note", text: line });
    } else {
      out.push({ kind: "meta", text: line });
    }
  }
  return { lines: out, hunks, cut };
}

function num(n: number | undefined): string {
  return n === undefined ? "" : String(n);
}

const SIGN: Record<LineKind, string> = { ctx: " ", add: "+", del: "-", hunk: "", meta: "", note: "" };

/** inline draws the diff as one column, removed lines above added ones. */
export function inline(d: Diff): HTMLElement {
  return h(
    "div",
    { class: "diff diff-inline", "data-testid": "diff-inline-view", role: "table", "aria-label": "Changes, line by line" },
    d.lines.map((l) =>
      l.kind === "hunk" || l.kind === "meta" || l.kind === "note"
        ? h("div", { class: `dl dl-${l.kind}`, role: "row" }, h("span", { class: "dl-text", role: "cell" }, l.text))
        : h(
            "div",
            { class: `dl dl-${l.kind}`, role: "row", "data-kind": l.kind },
            h("span", { class: "dl-no", role: "cell" }, num(l.old)),
            h("span", { class: "dl-no", role: "cell" }, num(l.new)),
            h("span", { class: "dl-sign", role: "cell", "aria-label": l.kind === "add" ? "added" : l.kind === "del" ? "removed" : undefined }, SIGN[l.kind]),
            h("span", { class: "dl-text", role: "cell" }, l.text),
          ),
    ),
  );
}

type Half = DiffLine | null;

/** pairs lines up for two columns: a run of removals faces the run of additions after it. */
function pairs(lines: DiffLine[]): [Half, Half, DiffLine?][] {
  const rows: [Half, Half, DiffLine?][] = [];
  let dels: DiffLine[] = [];
  let adds: DiffLine[] = [];
  const flush = () => {
    for (let i = 0; i < Math.max(dels.length, adds.length); i++) rows.push([dels[i] ?? null, adds[i] ?? null]);
    dels = [];
    adds = [];
  };
  for (const l of lines) {
    if (l.kind === "del") {
      if (adds.length) flush();
      dels.push(l);
    } else if (l.kind === "add") adds.push(l);
    else {
      flush();
      if (l.kind === "ctx") rows.push([l, l]);
      else rows.push([null, null, l]);
    }
  }
  flush();
  return rows;
}

function half(l: Half, side: "old" | "new"): HTMLElement[] {
  if (!l) return [h("span", { class: "dl-no dl-empty", role: "cell" }), h("span", { class: "dl-text dl-empty", role: "cell" })];
  const kind = l.kind === "ctx" ? "ctx" : l.kind;
  return [h("span", { class: `dl-no dl-${kind}`, role: "cell" }, num(side === "old" ? l.old : l.new)), h("span", { class: `dl-text dl-${kind}`, role: "cell" }, l.text)];
}

/** split draws the diff in two columns: the folder's version left, the change right. */
export function split(d: Diff): HTMLElement {
  return h(
    "div",
    { class: "diff diff-split", "data-testid": "diff-split-view", role: "table", "aria-label": "Changes, your version beside the new one" },
    pairs(d.lines).map(([a, b, whole]) =>
      whole ? h("div", { class: `dl dl-${whole.kind} dl-wide`, role: "row" }, h("span", { class: "dl-text", role: "cell" }, whole.text)) : h("div", { class: "dl", role: "row" }, half(a, "old"), half(b, "new")),
    ),
  );
}
