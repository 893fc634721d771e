//! Chunking a reply to a platform's message limit (issue 38 §1): pieces that each fit, cut at
//! the best break available, with Markdown code fences closed at the end of a piece and
//! reopened (same info string) at the start of the next, so every piece renders on its own.
//!
//! The rules, precisely:
//! - **Cost**: a piece's size is counted as the platform counts it: [`Limit::Utf16`] in UTF-16
//!   code units (Telegram's 4,096: an emoji outside the BMP costs 2), [`Limit::Chars`] in
//!   Unicode scalar values. The fence lines a piece gains count too.
//! - **Breaks**, in order of preference: a paragraph break (a run of two or more `\n`), a line
//!   break (a single `\n`), a space (one `' '`), then a hard cut on a char boundary. The
//!   furthest break of the best kind whose piece fills at least half the limit wins; when no
//!   break does, the furthest hard cut. If the whole rest fits, it is one piece.
//! - **Dropped text**: a cut at a break drops exactly that break (the whole `\n` run, the one
//!   `\n` or the one space) — a hard cut drops nothing — so the original text is the pieces'
//!   bodies ([`Piece::body`]) joined by the dropped separators ([`gap_before`]); the last gap
//!   (after the last piece) is a break only when a cut fell on a break at the very end.
//! - **Fences**: a fence line is a line that starts (after at most three spaces) with a run of
//!   three or more backticks; outside a fence it opens one (its info string, the rest of the
//!   line, may not hold a backtick), inside a fence a run at least as long with nothing but
//!   whitespace after it closes it. A piece ending inside a fence gets `\n` + the opening run
//!   (```` ``` ````) appended; the next piece gets the opening line (```` ```rust ```` + `\n`)
//!   prepended. A fence the text leaves open is closed at the end of the last piece. No cut
//!   falls inside a fence line (unless the line alone costs over a quarter of the limit).
//!   A fence whose reopen and close lines together cost over a third of the limit (a huge
//!   info string, a tiny limit: under 36 for ```` ```rust ````) is not repeated: the pieces
//!   of such a block are cut like plain text, the one case a piece may be unbalanced.
//! - **Empty text** gives no pieces; no piece has an empty body.
//! - A limit too small for one character (`Chars(0)`, or `Utf16(1)` before an emoji) still
//!   makes progress: that piece holds one character and exceeds the limit.

use std::ops::Range;

/// A platform's message limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// At most this many UTF-16 code units (Telegram: 4,096).
    Utf16(usize),
    /// At most this many Unicode scalar values.
    Chars(usize),
}

impl Limit {
    /// Telegram's `sendMessage` text limit: 4,096 UTF-16 code units.
    pub const TELEGRAM: Limit = Limit::Utf16(4096);

    /// The limit's number.
    pub fn max(self) -> usize {
        match self {
            Limit::Utf16(n) | Limit::Chars(n) => n,
        }
    }

    /// What `text` costs against this limit.
    pub fn cost(self, text: &str) -> usize {
        match self {
            Limit::Utf16(_) => text.encode_utf16().count(),
            Limit::Chars(_) => text.chars().count(),
        }
    }

    fn char_cost(self, c: char) -> usize {
        match self {
            Limit::Utf16(_) => c.len_utf16(),
            Limit::Chars(_) => 1,
        }
    }
}

/// One piece of a chunked text: `text[body]` with the fence lines it gained.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece {
    /// The opening fence line prepended (e.g. ```` "```rust\n" ````), when the piece starts
    /// inside a fence.
    pub reopen: Option<String>,
    /// The byte range of the original text this piece carries.
    pub body: Range<usize>,
    /// The closing fence appended (e.g. ```` "\n```" ````), when the piece ends inside a fence.
    pub close: Option<String>,
}

impl Piece {
    /// The piece as sent: reopen line, body, close line.
    pub fn text(&self, source: &str) -> String {
        let mut out = self.reopen.clone().unwrap_or_default();
        out.push_str(source.get(self.body.clone()).unwrap_or_default());
        out.push_str(self.close.as_deref().unwrap_or_default());
        out
    }
}

/// Splits `text` into pieces of at most `limit` (see the module doc for the exact rules):
/// paragraph breaks first, then line breaks, then spaces, then a hard cut on a char boundary;
/// a code fence open at a cut is closed in the piece and reopened with its info string in the
/// next. Empty text gives no pieces.
pub fn chunk(text: &str, limit: Limit) -> Vec<String> {
    pieces(text, limit).iter().map(|p| p.text(text)).collect()
}

/// [`chunk`] as byte ranges of `text` plus the fence lines each piece gained.
pub fn pieces(text: &str, limit: Limit) -> Vec<Piece> {
    let fences = Fences::scan(text, limit);
    let mut out = Vec::new();
    let mut start = 0;
    while start < text.len() {
        let reopen = fences.state_at(start).map(Fence::open_line);
        let (end, next) = cut(text, limit, &fences, start, reopen.as_deref());
        out.push(Piece {
            reopen,
            body: start..end,
            close: fences.state_at(end).map(Fence::close_line),
        });
        start = next;
    }
    out
}

/// The dropped separator before piece `i` (empty for the first piece and after hard cuts), and
/// for `i == pieces.len()` the one dropped at the end of the text.
pub fn gap_before<'t>(text: &'t str, pieces: &[Piece], i: usize) -> &'t str {
    let from = match i.checked_sub(1).and_then(|j| pieces.get(j)) {
        Some(p) => p.body.end,
        None => 0,
    };
    let to = pieces.get(i).map_or(text.len(), |p| p.body.start);
    text.get(from..to).unwrap_or_default()
}

/// Where the piece starting at `start` ends and where the next one starts.
fn cut(
    text: &str,
    limit: Limit,
    fences: &Fences,
    start: usize,
    reopen: Option<&str>,
) -> (usize, usize) {
    let max = limit.max();
    let prefix = reopen.map_or(0, |r| limit.cost(r));
    let total = |end: usize, body: usize| {
        prefix
            + body
            + fences
                .state_at(end)
                .map_or(0, |f| limit.cost(&f.close_line()))
    };
    // The furthest fitting cut of each kind: (end, next start, piece cost).
    let mut best: [Option<(usize, usize, usize)>; 4] = [None; 4];
    let rest = &text[start..];
    let mut body = 0;
    let mut chars = rest.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let p = start + i;
        if p > start && !fences.inside_line(p) {
            let kind_next = match c {
                '\n' => {
                    let run = rest[i..].bytes().take_while(|&b| b == b'\n').count();
                    let after_newline = text[..p].ends_with('\n');
                    match (run, after_newline) {
                        (_, true) => None,
                        (1, false) => Some((LINE, p + 1)),
                        (n, false) => Some((PARAGRAPH, p + n)),
                    }
                }
                ' ' => Some((SPACE, p + 1)),
                _ => None,
            };
            let cost = total(p, body);
            if cost <= max {
                if let Some((kind, next)) = kind_next {
                    best[kind] = Some((p, next, cost));
                }
                best[HARD] = Some((p, p, cost));
            }
        }
        body += limit.char_cost(c);
        if prefix + body > max {
            break;
        }
        if chars.peek().is_none() && total(text.len(), body) <= max {
            return (text.len(), text.len());
        }
    }
    let half = max.div_ceil(2);
    let chosen = [PARAGRAPH, LINE, SPACE]
        .iter()
        .find_map(|&k| best[k].filter(|&(_, _, cost)| cost >= half))
        .or(best[HARD]);
    match chosen {
        Some((end, next, _)) => (end, next),
        // Nothing fits: one character (or the whole fence line we may not cut), over the limit.
        None => {
            let one = rest.chars().next().map_or(0, char::len_utf8);
            let end = fences
                .line_end_if_inside(start + one)
                .unwrap_or(start + one);
            (end, end)
        }
    }
}

const PARAGRAPH: usize = 0;
const LINE: usize = 1;
const SPACE: usize = 2;
const HARD: usize = 3;

/// An open code fence: its backtick run and info string, and whether its reopen and close
/// lines are small enough to repeat in every piece.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Fence {
    ticks: usize,
    info: String,
    repeatable: bool,
}

impl Fence {
    fn open_line(&self) -> String {
        format!("{}{}\n", "`".repeat(self.ticks), self.info)
    }

    fn close_line(&self) -> String {
        format!("\n{}", "`".repeat(self.ticks))
    }
}

/// The fence lines of a text, in order: `(line start, line end, fence open after the line,
/// whether a cut may fall inside the line)`.
struct Fences {
    lines: Vec<(usize, usize, Option<Fence>, bool)>,
}

impl Fences {
    fn scan(text: &str, limit: Limit) -> Fences {
        let max = limit.max();
        let mut lines = Vec::new();
        let mut open: Option<Fence> = None;
        let mut ls = 0;
        for line in text.split('\n') {
            let le = ls + line.len();
            let indent = line.bytes().take_while(|&b| b == b' ').count();
            let marked = &line[indent..];
            let ticks = marked.bytes().take_while(|&b| b == b'`').count();
            let after = &marked[ticks..];
            let cuttable = limit.cost(line) > max / 4;
            if indent <= 3 && ticks >= 3 {
                match &open {
                    None if !after.contains('`') => {
                        let mut fence = Fence {
                            ticks,
                            info: after.trim().to_string(),
                            repeatable: false,
                        };
                        fence.repeatable = limit.cost(&fence.open_line())
                            + limit.cost(&fence.close_line())
                            <= max / 3;
                        open = Some(fence);
                        lines.push((ls, le, open.clone(), cuttable));
                    }
                    Some(f) if ticks >= f.ticks && after.trim().is_empty() => {
                        open = None;
                        lines.push((ls, le, None, cuttable));
                    }
                    _ => {}
                }
            }
            ls = le + 1;
        }
        Fences { lines }
    }

    /// The fence open at a cut at `p` (after every fence line that ends at or before `p`), if
    /// it is repeatable.
    fn state_at(&self, p: usize) -> Option<&Fence> {
        let n = self.lines.partition_point(|&(_, le, _, _)| le <= p);
        n.checked_sub(1)
            .and_then(|i| self.lines.get(i))
            .and_then(|(_, _, f, _)| f.as_ref())
            .filter(|f| f.repeatable)
    }

    /// Whether `p` falls strictly inside a fence line no cut may split.
    fn inside_line(&self, p: usize) -> bool {
        self.line_end_if_inside(p).is_some()
    }

    /// The end of the uncuttable fence line `p` falls strictly inside.
    fn line_end_if_inside(&self, p: usize) -> Option<usize> {
        let n = self.lines.partition_point(|&(_, le, _, _)| le < p);
        self.lines
            .get(n)
            .filter(|&&(ls, le, _, cuttable)| ls < p && p < le && !cuttable)
            .map(|&(_, le, _, _)| le)
    }
}

#[cfg(test)]
#[path = "chunk_tests.rs"]
mod tests;
