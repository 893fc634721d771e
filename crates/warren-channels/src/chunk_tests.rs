//! Tests of the chunker (issue 38 §1): limits in UTF-16 units and chars, the break
//! preference, the exact text a cut drops, and code fences closed and reopened across pieces.

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
    let sent = chunk(text, limit);
    assert_eq!(sent, ps.iter().map(|p| p.text(text)).collect::<Vec<_>>());
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
fn a_paragraph_break_is_preferred_to_a_later_line_break() {
    // Limit 30: the paragraph break at 12 is past half (15)? No: 12 < 15, so the line break
    // at 20 wins; at limit 22 the paragraph break (12 >= 11) wins over the line break at 20.
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
