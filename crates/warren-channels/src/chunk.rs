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
//! - **Empty text** gives no pieces; no piece has an empty body. [`chunk`] also leaves out a
//!   piece that is only whitespace (a platform rejects a blank message; only a long whitespace
//!   run can make one), so whitespace-only text gives no message; [`pieces`] keeps them.
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
/// next. Empty or whitespace-only text gives no pieces, and no piece is whitespace only.
pub fn chunk(text: &str, limit: Limit) -> Vec<String> {
    pieces(text, limit)
        .iter()
        .map(|p| p.text(text))
        .filter(|t| !t.trim().is_empty())
        .collect()
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
        prefix + body + fences.state_at(end).map_or(0, |f| f.close_cost())
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

    /// What [`Fence::close_line`] costs under any limit (ASCII only).
    fn close_cost(&self) -> usize {
        1 + self.ticks
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
mod tests {
    //! Limits in UTF-16 units and chars, the break preference, the exact text a cut drops,
    //! and code fences closed and reopened across pieces.

    use super::*;
    use proptest::prelude::*;

    /// Whether every ``` fence in `piece` is closed again in it (an independent count: a line that
    /// starts with ``` toggles; the generated texts have backticks only on fence lines).
    fn balanced(piece: &str) -> bool {
        piece
            .split('\n')
            .filter(|l| l.trim_start().starts_with("```"))
            .count()
            % 2
            == 0
    }

    /// Checks every rule of the module doc on `text` chunked to `limit`; returns the pieces.
    fn check(text: &str, limit: Limit) -> Vec<String> {
        let ps = pieces(text, limit);
        let sent: Vec<String> = ps.iter().map(|p| p.text(text)).collect();
        let blank = |t: &String| t.trim().is_empty();
        assert_eq!(
            chunk(text, limit),
            sent.iter()
                .filter(|t| !blank(t))
                .cloned()
                .collect::<Vec<_>>()
        );
        let mut rebuilt = String::new();
        for (i, p) in ps.iter().enumerate() {
            let piece = &sent[i];
            assert!(
                limit.cost(piece) <= limit.max(),
                "piece {i} costs {} > {limit:?}: {piece:?}",
                limit.cost(piece)
            );
            assert!(!p.body.is_empty(), "piece {i} has an empty body");
            let gap = gap_before(text, &ps, i);
            if i == 0 {
                assert_eq!(gap, "", "the first piece starts at the text's start");
            } else {
                assert!(
                    is_break(gap),
                    "gap before piece {i} is not a break: {gap:?}"
                );
            }
            rebuilt.push_str(gap);
            rebuilt.push_str(&text[p.body.clone()]);
            if let Some(r) = &p.reopen {
                assert!(r.starts_with("```") && r.ends_with('\n'), "{r:?}");
            }
            if let Some(c) = &p.close {
                assert!(c.starts_with("\n```"), "{c:?}");
            }
            assert!(balanced(piece), "piece {i} leaves a fence open: {piece:?}");
        }
        let tail = gap_before(text, &ps, ps.len());
        assert!(is_break(tail), "text dropped at the end: {tail:?}");
        rebuilt.push_str(tail);
        assert_eq!(
            rebuilt, text,
            "bodies joined by the dropped breaks give the text back"
        );
        sent
    }

    /// A dropped separator: nothing (hard cut), one space, one `\n`, or a run of `\n`.
    fn is_break(gap: &str) -> bool {
        gap.is_empty() || gap == " " || (!gap.is_empty() && gap.bytes().all(|b| b == b'\n'))
    }

    #[test]
    fn empty_text_gives_no_pieces() {
        assert_eq!(chunk("", Limit::TELEGRAM), Vec::<String>::new());
        assert_eq!(chunk(" \n\n \n", Limit::TELEGRAM), Vec::<String>::new());
    }

    #[test]
    fn a_whitespace_only_piece_is_left_out_of_the_messages() {
        let text = format!(
            "{}\n\n{}\n\n{}",
            "a".repeat(30),
            " ".repeat(30),
            "b".repeat(30)
        );
        let all: Vec<String> = pieces(&text, Limit::Chars(32))
            .iter()
            .map(|p| p.text(&text))
            .collect();
        assert_eq!(all, vec!["a".repeat(30), " ".repeat(30), "b".repeat(30)]);
        assert_eq!(
            check(&text, Limit::Chars(32)),
            vec!["a".repeat(30), " ".repeat(30), "b".repeat(30)]
        );
        assert_eq!(
            chunk(&text, Limit::Chars(32)),
            vec!["a".repeat(30), "b".repeat(30)]
        );
    }

    #[test]
    fn text_that_fits_is_one_piece_unchanged() {
        let text = "hello\n\nworld \n";
        assert_eq!(check(text, Limit::TELEGRAM), vec![text.to_string()]);
        let exact = "x".repeat(4096);
        assert_eq!(check(&exact, Limit::TELEGRAM), vec![exact.clone()]);
        let over = "x".repeat(4097);
        assert_eq!(check(&over, Limit::TELEGRAM).len(), 2);
    }

    #[test]
    fn a_paragraph_break_is_preferred_to_a_later_line_break_when_it_fills_half_the_limit() {
        // Limit 22: the paragraph break at 12 fills half (11), so it wins over the line break
        // at 22. Limit 30: 12 is under half (15), so the furthest line break (22) wins.
        let text = "aaaa bbbb cc\n\ndddd eee\nffff gggg hhhh";
        assert_eq!(
            check(text, Limit::Chars(22)),
            vec!["aaaa bbbb cc", "dddd eee\nffff gggg", "hhhh"]
        );
        assert_eq!(
            check(text, Limit::Chars(30)),
            vec!["aaaa bbbb cc\n\ndddd eee", "ffff gggg hhhh"]
        );
    }

    #[test]
    fn a_line_break_is_preferred_to_spaces_and_spaces_to_a_hard_cut() {
        let text = "one two three\nfour five six seven";
        assert_eq!(
            check(text, Limit::Chars(20)),
            vec!["one two three", "four five six seven"]
        );
        // No break in the first half of the window: the word is cut hard, nothing dropped.
        let long = format!("{} tail", "w".repeat(30));
        assert_eq!(
            check(&long, Limit::Chars(20)),
            vec!["w".repeat(20), "w".repeat(10) + " tail"]
        );
        let spaced = "alpha beta gamma delta epsilon";
        assert_eq!(
            check(spaced, Limit::Chars(12)),
            vec!["alpha beta", "gamma delta", "epsilon"]
        );
    }

    #[test]
    fn a_run_of_blank_lines_is_dropped_whole_at_a_cut() {
        let text = "first paragraph\n\n\n\nsecond paragraph";
        let ps = pieces(text, Limit::Chars(20));
        assert_eq!(
            check(text, Limit::Chars(20)),
            vec!["first paragraph", "second paragraph"]
        );
        assert_eq!(gap_before(text, &ps, 1), "\n\n\n\n");
    }

    #[test]
    fn astral_characters_count_two_utf16_units_and_are_never_split() {
        let text = "😀".repeat(3000); // 6,000 UTF-16 units, 3,000 chars
        let pieces = check(&text, Limit::TELEGRAM);
        assert_eq!(pieces, vec!["😀".repeat(2048), "😀".repeat(952)]);
        assert_eq!(check(&text, Limit::Chars(4096)), vec![text.clone()]);
        // An odd budget: 3 units hold one emoji, never half of one.
        let small = check("😀😀😀", Limit::Utf16(3));
        assert_eq!(small, vec!["😀", "😀", "😀"]);
        // Two-byte and three-byte UTF-8 chars cut on their boundaries.
        assert_eq!(check("éééé", Limit::Chars(3)), vec!["ééé", "é"]);
        assert_eq!(
            check("日本語テキスト", Limit::Utf16(4)),
            vec!["日本語テ", "キスト"]
        );
    }

    #[test]
    fn a_limit_below_one_character_still_makes_progress() {
        assert_eq!(chunk("ab", Limit::Chars(0)), vec!["a", "b"]);
        assert_eq!(chunk("😀a", Limit::Utf16(1)), vec!["😀", "a"]);
    }

    #[test]
    fn a_cut_inside_a_code_fence_closes_it_and_the_next_piece_reopens_it_with_its_info() {
        let code: String = (0..8).map(|i| format!("let x{i} = {i};\n")).collect();
        let text = format!("Here:\n\n```rust\n{code}```\n\nDone.");
        let limit = Limit::Chars(80);
        let sent = check(&text, limit);
        assert!(sent.len() >= 2, "{sent:?}");
        assert!(sent[0].ends_with("\n```"), "{:?}", sent[0]);
        assert!(sent[1].starts_with("```rust\n"), "{:?}", sent[1]);
        let ps = pieces(&text, limit);
        assert_eq!(ps[0].close.as_deref(), Some("\n```"));
        assert_eq!(ps[1].reopen.as_deref(), Some("```rust\n"));
        // The first piece is the prose and the code start, cut on a line break inside the fence.
        assert_eq!(
            sent[0],
            "Here:\n\n```rust\nlet x0 = 0;\nlet x1 = 1;\nlet x2 = 2;\nlet x3 = 3;\nlet x4 = 4;\n```"
        );
    }

    #[test]
    fn a_longer_fence_and_its_info_string_are_repeated_exactly() {
        let body: String = (0..10).map(|i| format!("line {i} ``` inside\n")).collect();
        let text = format!("````md title=x\n{body}````\nafter");
        for piece in check_lenient(&text, Limit::Chars(60)) {
            let opens = piece.starts_with("````md title=x\n");
            let first = piece.starts_with("````md");
            assert!(opens || !first, "{piece:?}");
        }
        let ps = pieces(&text, Limit::Chars(60));
        assert_eq!(ps[1].reopen.as_deref(), Some("````md title=x\n"));
        assert_eq!(ps[0].close.as_deref(), Some("\n````"));
    }

    /// [`check`] without the independent fence count (for texts with backticks inside a fence).
    fn check_lenient(text: &str, limit: Limit) -> Vec<String> {
        let sent = chunk(text, limit);
        for piece in &sent {
            assert!(limit.cost(piece) <= limit.max(), "{piece:?}");
        }
        sent
    }

    #[test]
    fn a_fence_the_text_leaves_open_is_closed_in_the_last_piece() {
        let text = "```python\nprint(1)\nprint(2)";
        assert_eq!(
            check(text, Limit::TELEGRAM),
            vec!["```python\nprint(1)\nprint(2)\n```"]
        );
    }

    #[test]
    fn prose_before_a_fence_is_cut_at_the_line_break_before_the_fence_line() {
        let text = format!("{}\n```typescript\nconst a = 1;\n```", "p".repeat(74));
        assert_eq!(
            check(&text, Limit::Chars(80)),
            vec![
                "p".repeat(74),
                "```typescript\nconst a = 1;\n```".to_string()
            ]
        );
    }

    #[test]
    fn a_ten_thousand_character_answer_with_code_blocks_arrives_as_ordered_fitting_chunks() {
        let mut text = String::new();
        let mut n = 0;
        while text.len() < 10_000 {
            text.push_str(&format!(
                "Paragraph {n}: the quick brown fox jumps over the lazy dog, twice. 🦀\n\n"
            ));
            if n % 5 == 2 {
                text.push_str("```rust\n");
                for i in 0..120 {
                    text.push_str(&format!("    let value_{n}_{i} = compute({i}); // step\n"));
                }
                text.push_str("```\n\n");
            }
            n += 1;
        }
        assert!(text.chars().count() >= 10_000);
        let sent = check(&text, Limit::TELEGRAM);
        assert!(sent.len() >= 3, "{} pieces", sent.len());
        for piece in &sent {
            assert!(piece.encode_utf16().count() <= 4096);
        }
        // Order kept: the paragraph numbers rise across the pieces.
        let numbers: Vec<usize> = sent
            .iter()
            .flat_map(|p| p.split("Paragraph ").skip(1))
            .filter_map(|s| s.split(':').next()?.parse().ok())
            .collect();
        assert_eq!(numbers, (0..n).collect::<Vec<_>>());
        // At least one cut fell inside a code block and was closed and reopened.
        assert!(
            sent.iter().skip(1).any(|p| p.starts_with("```rust\n")),
            "{sent:?}"
        );
    }

    /// Texts of prose, spaces, newline runs, emoji and ``` fenced blocks.
    fn document() -> impl Strategy<Value = String> {
        let word = prop_oneof![
            "[a-z]{1,12}",
            Just("😀".to_string()),
            Just("é".to_string()),
            "[a-z]{20,70}",
        ];
        let line = prop::collection::vec(word, 0..8).prop_map(|w| w.join(" "));
        let code_line = ("[ ]{0,6}", "[a-z(); =]{0,50}").prop_map(|(i, c)| format!("{i}{c}"));
        let code = (
            prop_oneof![Just(""), Just("rust"), Just("py")],
            prop::collection::vec(code_line, 0..12),
        )
            .prop_map(|(info, lines)| {
                let mut s = format!("```{info}\n");
                for l in lines {
                    s.push_str(&l);
                    s.push('\n');
                }
                s
            });
        let block = prop_oneof![
            prop::collection::vec(line.clone(), 1..6).prop_map(|l| l.join("\n")),
            code.clone().prop_map(|c| c + "```"),
        ];
        let sep = prop_oneof![Just("\n"), Just("\n\n"), Just("\n\n\n"), Just(" \n")];
        // Every fence is closed but perhaps the last (an answer cut off inside a code block).
        (
            prop::collection::vec((block, sep), 0..8),
            prop::option::of(code),
            any::<bool>(),
        )
            .prop_map(|(blocks, open, trail)| {
                let mut s = String::new();
                for (b, sep) in &blocks {
                    s.push_str(b);
                    s.push_str(sep);
                }
                if let Some(open) = open {
                    s.push_str(&open);
                }
                if !trail {
                    while s.ends_with('\n') {
                        s.pop();
                    }
                }
                s
            })
    }

    fn limit() -> impl Strategy<Value = Limit> {
        prop_oneof![
            (40usize..400).prop_map(Limit::Utf16),
            (40usize..400).prop_map(Limit::Chars)
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]

        /// Every piece fits, keeps fences balanced, and the bodies joined by the dropped breaks give
        /// the text back in order (`check`).
        #[test]
        fn chunking_keeps_every_rule(text in document(), limit in limit()) {
            let sent = check(&text, limit);
            prop_assert_eq!(sent.is_empty(), text.is_empty());
        }

        /// An unclosed fence in the text is an odd count; every piece of it is still balanced
        /// (checked in `check`), and a text without fences gets no fence lines.
        #[test]
        fn prose_without_fences_gains_no_fence_lines(text in "[a-z \n😀]{0,600}", limit in limit()) {
            for p in pieces(&text, limit) {
                prop_assert!(p.reopen.is_none() && p.close.is_none());
            }
            check(&text, limit);
        }
    }
}
