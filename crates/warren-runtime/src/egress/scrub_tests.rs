//! Tests of the scrubber (issue 35 §5): one per transform, each showing the config redactor
//! alone (the scrubber before issue 35) lets the form through, and property tests over random
//! values and surrounding text.

use proptest::prelude::*;
use warren_config::Redactor;

use super::*;

const SECRET: &str = "ghp_TopSecretBrokerValue_7781";

/// Whether `text` holds any run of 8+ characters of `secret`, compared case-insensitively.
fn holds_run(text: &str, secret: &str) -> bool {
    let (t, s) = (text.to_ascii_lowercase(), secret.to_ascii_lowercase());
    (0..=s.len().saturating_sub(8)).any(|i| t.contains(&s[i..i + 8]))
}

fn reversed(s: &str) -> String {
    s.chars().rev().collect()
}

fn swapcase(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_uppercase() {
                c.to_ascii_lowercase()
            } else {
                c.to_ascii_uppercase()
            }
        })
        .collect()
}

fn json_u(s: &str) -> String {
    s.chars().map(|c| format!("\\u{:04x}", c as u32)).collect()
}

fn spaced(s: &str) -> String {
    s.chars().map(|c| format!("{c} ")).collect()
}

fn pct_lower(s: &str) -> String {
    s.bytes().map(|b| format!("%{b:02x}")).collect()
}

fn html_entities(s: &str) -> String {
    s.chars()
        .enumerate()
        .map(|(i, c)| {
            if i % 2 == 0 {
                format!("&#{};", c as u32)
            } else {
                format!("&#x{:X};", c as u32)
            }
        })
        .collect()
}

/// A text transform (or its inverse).
type Transform = fn(&str) -> String;

/// Every transform of issue 35 §5, named, with the inverse that shows the value is in it.
fn transforms() -> Vec<(&'static str, Transform, Transform)> {
    vec![
        ("reversed", reversed, reversed),
        ("case-swapped", swapcase, swapcase),
        ("\\u-escaped", json_u, |s| s.to_string()),
        ("spaced", spaced, |s| s.replace(' ', "")),
        ("lower-case percent-encoded", pct_lower, |s| s.to_string()),
        ("HTML entities", html_entities, |s| s.to_string()),
    ]
}

#[test]
fn each_cheap_transform_of_a_reflected_secret_is_scrubbed_and_the_plain_redactor_missed_it_issue35()
{
    let old = Redactor::new([SECRET]);
    let new = Scrubber::new([SECRET]);
    for (name, transform, _) in transforms() {
        let text = format!("the server says: [{}] and more", transform(SECRET));
        // Guard off (the redactor alone, as before): the form goes through.
        assert_eq!(
            old.redact(&text),
            text,
            "{name}: the old redactor caught it"
        );
        let out = new.scrub(&text);
        assert!(out.contains(REDACTED), "{name}: {out}");
        assert!(
            out.starts_with("the server says: [") && out.ends_with("] and more"),
            "{name}: the surrounding text stays: {out}"
        );
        assert!(
            !holds_run(&out, SECRET) && !holds_run(&reversed(&out), SECRET),
            "{name}: {out}"
        );
    }
}

#[test]
fn escapes_are_decoded_whatever_their_case_and_depth_issue35() {
    let s = Scrubber::new(["s3cr3t/Value+with=chars"]);
    for text in [
        "s3cr3t%2fValue%2bwith%3dchars",        // lower-case percent
        "S3CR3T%2FVALUE%2BWITH%3DCHARS",        // upper-case everything
        "s3cr3t%252FValue%252Bwith%253Dchars",  // percent-encoded twice
        "s3cr3t\\/Value+with\\u003dchars",      // JSON escapes
        "s3cr3t&#x2F;Value&#43;with&#61;chars", // HTML references
        "s3cr3t\\x2fValue\\x2bwith\\x3dchars",  // C escapes
    ] {
        let out = s.scrub_owned(&format!("<{text}>"));
        assert_eq!(out, format!("<{REDACTED}>"), "{text}");
    }
    // A surrogate pair decodes to its character (and a lone one is left alone).
    let s = Scrubber::new(["emoji-😀-secret-value"]);
    assert_eq!(s.scrub("emoji-\\ud83d\\ude00-secret-value"), REDACTED);
    assert_eq!(s.scrub("x \\ud83d y"), "x \\ud83d y");
}

#[test]
fn the_edges_of_a_value_are_caught_at_a_word_edge_but_not_inside_a_word_issue35() {
    let s = Scrubber::new([SECRET]);
    // An error after a server-side transform kept the last 6 characters.
    let masked = "invalid token ghp_****************e_7781, try again";
    assert_eq!(
        Redactor::new([SECRET]).redact(masked),
        masked,
        "guard off: kept"
    );
    assert_eq!(
        s.scrub(masked),
        format!("invalid token ghp_****************{REDACTED}, try again")
    );
    // The first 6, the last 7, and both reversed.
    assert!(s.scrub("prefix ghp_To…").contains(REDACTED));
    assert!(s.scrub("…ue_7781").contains(REDACTED));
    assert!(s.scrub("1877_e…").contains(REDACTED));
    // Not when the run goes on inside a word (e_7781 followed by more letters).
    assert_eq!(s.scrub("code e_7781abc"), "code e_7781abc");
    // Short values have no edges (they are matched whole or by 8-byte runs).
    let short = Scrubber::new(["abcdefghij"]);
    assert_eq!(short.scrub("ghij ok"), "ghij ok");
}

#[test]
fn derived_encodings_and_connection_passwords_keep_working_issue24() {
    let s = Scrubber::new([SECRET, "postgres://bob:pgpassword-long@db/w"]);
    let basic = base64(format!("user:{SECRET}").as_bytes());
    let hex: String = SECRET.bytes().map(|b| format!("{b:02X}")).collect();
    for text in [
        format!("Basic {basic}"),
        format!("hex {hex}"),
        format!("b64 {}", base64(SECRET.as_bytes())),
    ] {
        let out = s.scrub(&text);
        assert!(
            out.contains(REDACTED) && !holds_run(&out, SECRET),
            "{text} -> {out}"
        );
    }
    assert_eq!(
        s.scrub("postgres://bob:pgpassword-long@db/w"),
        "postgres://bob:***@db/w"
    );
    assert!(matches!(
        s.scrub("nothing secret here at all"),
        Cow::Borrowed(_)
    ));
    assert!(Scrubber::default().is_empty());
}

#[test]
fn multibyte_text_around_a_match_keeps_char_boundaries() {
    let s = Scrubber::new([SECRET]);
    let out = s.scrub_owned(&format!("é→{}←é", json_u(SECRET)));
    assert_eq!(out, format!("é→{REDACTED}←é"));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// For any value and surrounding text, no transform leaves a run of 8+ characters of the
    /// value (after undoing the transform) in the scrubbed text.
    #[test]
    fn no_transform_leaves_a_run_of_the_value(
        value in "[A-Za-z0-9_-]{16,40}",
        before in "[ -~]{0,40}",
        after in "[ -~]{0,40}",
    ) {
        let s = Scrubber::new([value.as_str()]);
        for (name, transform, inverse) in transforms() {
            let text = format!("{before}{}{after}", transform(&value));
            let out = s.scrub(&text);
            let undone = match name {
                "reversed" => reversed(&out),
                _ => inverse(&out),
            };
            // The decoded forms are checked on the scrubber's own decoding of the output.
            let plain = View::of(undone.as_bytes());
            let mut view = plain;
            while let Some(next) = view.decoded() {
                view = next;
            }
            let seen = String::from_utf8_lossy(&view.bytes).into_owned();
            prop_assert!(!holds_run(&seen, &value), "{}: {} -> {}", name, text, out);
        }
    }

    /// Text that holds no secret comes back unchanged.
    #[test]
    fn unrelated_text_is_unchanged(text in "[a-z ]{0,200}") {
        let s = Scrubber::new([SECRET]);
        prop_assert_eq!(s.scrub_owned(&text), text);
    }
}
