/** A line diff of two texts (longest common subsequence), for showing an edit as it streams. */

/** One line of a diff. */
export interface IDiffLine {
  kind: 'same' | 'removed' | 'added';
  text: string;
}

/** The lines of `before` and `after`: kept, removed (from `before`), added (from `after`). */
export function lineDiff(before: string, after: string): IDiffLine[] {
  const a = before.split('\n');
  const b = after.split('\n');
  // common[i][j]: the longest common subsequence of a[i:] and b[j:]
  const common = Array.from({ length: a.length + 1 }, () =>
    new Array<number>(b.length + 1).fill(0)
  );
  for (let i = a.length - 1; i >= 0; i--) {
    for (let j = b.length - 1; j >= 0; j--) {
      common[i][j] =
        a[i] === b[j] ? common[i + 1][j + 1] + 1 : Math.max(common[i + 1][j], common[i][j + 1]);
    }
  }
  const lines: IDiffLine[] = [];
  let i = 0;
  let j = 0;
  while (i < a.length || j < b.length) {
    if (i < a.length && j < b.length && a[i] === b[j]) {
      lines.push({ kind: 'same', text: a[i++] });
      j++;
    } else if (j < b.length && (i === a.length || common[i][j + 1] > common[i + 1][j])) {
      lines.push({ kind: 'added', text: b[j++] });
    } else {
      lines.push({ kind: 'removed', text: a[i++] });
    }
  }
  return lines;
}
