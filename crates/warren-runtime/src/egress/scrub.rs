//! The scrubber (issue 24 §2, issue 35 §5, CFG-6): what stands between a secret and the model
//! for everything an agent's tools bring back (`http_request` replies, file reads, shell, git,
//! MCP results). Built on the config's [`Redactor`] (any run of 8+ bytes of a secret, exactly
//! as written) and extended for the forms an echoing server or a rewritten program can cheaply
//! give a value in:
//!
//! - **derived encodings**: percent-encoded, hex, and base64 (standard and URL-safe) at each of
//!   the three alignments a value can take inside a longer encoded string;
//! - **case**: every match is ASCII-case-insensitive (case-swapped values, upper-case hex);
//! - **escapes**: the text is also matched after decoding `%hh` (either case), JSON and C
//!   escapes (`\uXXXX` with surrogate pairs, `\xhh`, `\n`, `\/`, ...) and HTML character
//!   references (`&#NN;`, `&#xHH;`, `&amp;` `&lt;` `&gt;` `&quot;` `&apos;`), up to three
//!   rounds (double encoding);
//! - **spacing**: the decoded text is also matched with its whitespace removed;
//! - **reversal**: each value is also looked for backwards;
//! - **edges**: the first and the last [`EDGE`] characters of a value of at least
//!   `2 * EDGE` characters, where the run ends at the edge of a word (a masked echo such as
//!   `sk-…****…7781` keeps its tail), also when reversed.
//!
//! A match on a decoded view is mapped back to the bytes of the original text it came from,
//! and those are replaced by `[redacted]`. What it cannot catch is listed in
//! docs/security.md ("What the scrubber cannot catch"): any encoding it does not undo (base32,
//! rot13, an XOR, compression, base64 of a transformed value, separators other than
//! whitespace), a value split across calls, and runs of fewer than 8 characters from inside a
//! value. A host that echoes a value can always encode it.

use std::borrow::Cow;
use std::ops::Range;

use warren_config::redact::REDACTED;
use warren_config::{Config, Redactor};

/// Characters at a value's start or end that count as a leak on their own.
pub const EDGE: usize = 6;
/// Decoding rounds (a value percent-encoded twice is caught).
const ROUNDS: usize = 3;

/// The scrubber of one install's secrets.
#[derive(Clone, Default)]
pub struct Scrubber {
    /// The config redactor plus the derived encodings, matched exactly (connection URL
    /// passwords keep their `***` marker).
    exact: Redactor,
    /// Lower-cased values, their reversals and whitespace-free forms, and the derived
    /// encodings, matched on the folded views.
    folded: Redactor,
    /// Lower-cased starts and ends of the values (and of their reversals): `(bytes, is_end)`.
    edges: Vec<(Vec<u8>, bool)>,
}

impl std::fmt::Debug for Scrubber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scrubber").finish_non_exhaustive()
    }
}

impl Scrubber {
    /// The scrubber of every secret of `config` (see [`Redactor::from_config`]).
    pub fn from_config(config: &Config) -> Self {
        Self::over(Redactor::from_config(config))
    }

    /// The scrubber of `values` (plain secrets; tests).
    pub fn new<I: IntoIterator<Item = S>, S: AsRef<str>>(values: I) -> Self {
        Self::over(Redactor::new(values))
    }

    /// Extends `base` (its values as registered) with every form above.
    fn over(base: Redactor) -> Self {
        let values: Vec<String> = base
            .values()
            .filter_map(|v| std::str::from_utf8(v).ok())
            .map(str::to_string)
            .collect();
        let mut exact = base;
        let mut folded = Redactor::default();
        let mut edges = Vec::new();
        for value in &values {
            let forms = derived_forms(value);
            for form in &forms {
                exact.add_literal(form);
                folded.add_literal(&form.to_ascii_lowercase());
            }
            let lower = value.to_ascii_lowercase();
            let reversed: String = lower.chars().rev().collect();
            for v in [&lower, &reversed] {
                folded.add_literal(v);
                let squeezed: String = v.chars().filter(|c| !c.is_ascii_whitespace()).collect();
                if squeezed != *v {
                    folded.add_literal(&squeezed);
                }
            }
            let chars: Vec<char> = lower.chars().collect();
            if chars.len() >= 2 * EDGE {
                for v in [&chars, &chars.iter().rev().copied().collect()] {
                    let start: String = v[..EDGE].iter().collect();
                    let end: String = v[v.len() - EDGE..].iter().collect();
                    edges.push((start.into_bytes(), false));
                    edges.push((end.into_bytes(), true));
                }
            }
        }
        Self {
            exact,
            folded,
            edges,
        }
    }

    /// Whether there is nothing to scrub.
    pub fn is_empty(&self) -> bool {
        self.exact.is_empty()
    }

    /// `text` without any secret in any form above (borrowed when nothing matched).
    pub fn scrub<'a>(&self, text: &'a str) -> Cow<'a, str> {
        if self.is_empty() {
            return Cow::Borrowed(text);
        }
        // The views are matched on the text as it came (an exact replacement first would cut
        // the escapes around it); what the exact pass alone covers is left to it, so a
        // connection URL keeps its `***` form.
        let spans = self.spans(text);
        if spans.is_empty() {
            return self.exact.redact(text);
        }
        let mut out = String::with_capacity(text.len());
        let mut at = 0;
        for r in spans {
            out.push_str(&text[at..r.start]);
            out.push_str(REDACTED);
            at = r.end;
        }
        out.push_str(&text[at..]);
        let mut out = self.exact.redact(&out).into_owned();
        // A run found by the exact pass and its continuation found on a view: one marker.
        let doubled = REDACTED.repeat(2);
        while out.contains(&doubled) {
            out = out.replace(&doubled, REDACTED);
        }
        Cow::Owned(out)
    }

    /// Scrubs every string (and key) of `value` in place (a tool's JSON output).
    pub fn scrub_value(&self, value: &mut serde_json::Value) {
        use serde_json::Value;
        if self.is_empty() {
            return;
        }
        match value {
            Value::String(s) => {
                if let Cow::Owned(clean) = self.scrub(s) {
                    *s = clean;
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|v| self.scrub_value(v)),
            Value::Object(map) => {
                let entries = std::mem::take(map);
                for (k, mut v) in entries {
                    self.scrub_value(&mut v);
                    map.insert(self.scrub_owned(&k), v);
                }
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }

    /// `text` scrubbed, as an owned string.
    pub fn scrub_owned(&self, text: &str) -> String {
        self.scrub(text).into_owned()
    }

    /// Merged, char-aligned ranges of `text` to replace.
    fn spans(&self, text: &str) -> Vec<Range<usize>> {
        let mut found: Vec<Range<usize>> = Vec::new();
        let mut view = View::of(text.as_bytes());
        self.match_view(&view, &mut found);
        let mut decoded = false;
        for _ in 0..ROUNDS {
            match view.decoded() {
                Some(next) => {
                    view = next;
                    decoded = true;
                }
                None => break,
            }
        }
        if decoded {
            self.match_view(&view, &mut found);
        }
        if let Some(squeezed) = view.squeezed() {
            self.match_view(&squeezed, &mut found);
        }
        let exact = self.exact.find(text.as_bytes());
        found.retain(|r| !exact.iter().any(|e| e.start <= r.start && r.end <= e.end));
        found.sort_unstable_by_key(|r| (r.start, std::cmp::Reverse(r.end)));
        let mut merged: Vec<Range<usize>> = Vec::with_capacity(found.len());
        for mut r in found {
            while !text.is_char_boundary(r.start) {
                r.start -= 1;
            }
            while !text.is_char_boundary(r.end) {
                r.end += 1;
            }
            match merged.last_mut() {
                Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
                _ => merged.push(r),
            }
        }
        merged
    }

    /// Adds the original ranges of every match in `view` (folded) to `found`.
    fn match_view(&self, view: &View, found: &mut Vec<Range<usize>>) {
        let folded = view.bytes.to_ascii_lowercase();
        for r in self.folded.find(&folded) {
            found.push(view.original(r));
        }
        let word = |b: Option<&u8>| b.is_some_and(u8::is_ascii_alphanumeric);
        for (edge, is_end) in &self.edges {
            let n = edge.len();
            for (at, w) in folded.windows(n).enumerate() {
                if w != edge.as_slice() {
                    continue;
                }
                // The run must stop where the value stops: at the edge of a word.
                let outside = if *is_end {
                    folded.get(at + n)
                } else {
                    at.checked_sub(1).and_then(|i| folded.get(i))
                };
                if !word(outside) {
                    found.push(view.original(at..at + n));
                }
            }
        }
    }
}

/// A view of a text: its bytes, and for each byte the range of the original text it stands
/// for.
struct View {
    bytes: Vec<u8>,
    from: Vec<(usize, usize)>,
}

impl View {
    fn of(text: &[u8]) -> Self {
        Self {
            bytes: text.to_vec(),
            from: (0..text.len()).map(|i| (i, i + 1)).collect(),
        }
    }

    /// The original range of `r` (non-empty, within the view).
    fn original(&self, r: Range<usize>) -> Range<usize> {
        let start = self.from.get(r.start).map_or(0, |f| f.0);
        let end = r
            .end
            .checked_sub(1)
            .and_then(|i| self.from.get(i))
            .map_or(start, |f| f.1);
        start..end.max(start)
    }

    /// The view with one round of escapes decoded; `None` when there was none.
    fn decoded(&self) -> Option<Self> {
        let b = &self.bytes;
        let mut out = Self {
            bytes: Vec::with_capacity(b.len()),
            from: Vec::with_capacity(b.len()),
        };
        let mut changed = false;
        let mut i = 0;
        while i < b.len() {
            if let Some((decoded, used)) = unescape(&b[i..]) {
                let range = (self.from[i].0, self.from[i + used - 1].1);
                for byte in decoded {
                    out.bytes.push(byte);
                    out.from.push(range);
                }
                i += used;
                changed = true;
            } else {
                out.bytes.push(b[i]);
                out.from.push(self.from[i]);
                i += 1;
            }
        }
        changed.then_some(out)
    }

    /// The view without ASCII whitespace; `None` when it has none.
    fn squeezed(&self) -> Option<Self> {
        if !self.bytes.iter().any(u8::is_ascii_whitespace) {
            return None;
        }
        let (bytes, from) = self
            .bytes
            .iter()
            .zip(&self.from)
            .filter(|(b, _)| !b.is_ascii_whitespace())
            .map(|(b, f)| (*b, *f))
            .unzip();
        Some(Self { bytes, from })
    }
}

fn hex_value(bytes: &[u8]) -> Option<u32> {
    let text = std::str::from_utf8(bytes).ok()?;
    if text.is_empty() || !text.bytes().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    u32::from_str_radix(text, 16).ok()
}

fn utf8(c: char) -> Vec<u8> {
    let mut buf = [0u8; 4];
    c.encode_utf8(&mut buf).as_bytes().to_vec()
}

/// The escape at the start of `b`, decoded, and how many bytes it took.
fn unescape(b: &[u8]) -> Option<(Vec<u8>, usize)> {
    match *b.first()? {
        b'%' => {
            let v = hex_value(b.get(1..3)?)?;
            Some((vec![u8::try_from(v).ok()?], 3))
        }
        b'\\' => match *b.get(1)? {
            b'u' | b'U' => {
                let unit = hex_value(b.get(2..6)?)?;
                if (0xD800..0xDC00).contains(&unit) {
                    // A surrogate pair: `\uD83D\uDE00`.
                    let low = b
                        .get(6..8)
                        .filter(|p| p[0] == b'\\' && matches!(p[1], b'u' | b'U'))
                        .and_then(|_| hex_value(b.get(8..12)?))
                        .filter(|l| (0xDC00..0xE000).contains(l))?;
                    let c = char::from_u32(0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00))?;
                    return Some((utf8(c), 12));
                }
                Some((utf8(char::from_u32(unit)?), 6))
            }
            b'x' | b'X' => {
                let v = hex_value(b.get(2..4)?)?;
                Some((vec![u8::try_from(v).ok()?], 4))
            }
            c @ (b'"' | b'\\' | b'/' | b'\'') => Some((vec![c], 2)),
            b'n' => Some((vec![b'\n'], 2)),
            b't' => Some((vec![b'\t'], 2)),
            b'r' => Some((vec![b'\r'], 2)),
            _ => None,
        },
        b'&' => {
            let end = b.iter().take(12).position(|&c| c == b';')?;
            let body = &b[1..end];
            let c = match body {
                [b'#', b'x' | b'X', hex @ ..] => char::from_u32(hex_value(hex)?)?,
                [b'#', dec @ ..] => {
                    let text = std::str::from_utf8(dec).ok()?;
                    if text.is_empty() || !text.bytes().all(|c| c.is_ascii_digit()) {
                        return None;
                    }
                    char::from_u32(text.parse().ok()?)?
                }
                name => match name.to_ascii_lowercase().as_slice() {
                    b"amp" => '&',
                    b"lt" => '<',
                    b"gt" => '>',
                    b"quot" => '"',
                    b"apos" => '\'',
                    _ => return None,
                },
            };
            Some((utf8(c), end + 1))
        }
        _ => None,
    }
}

/// Forms a server may echo `value` in: percent-encoded, hex, and base64 (standard and URL-safe)
/// at the three alignments a value can take inside a longer encoded string, each without the
/// partial characters at its edges.
fn derived_forms(value: &str) -> Vec<String> {
    let bytes = value.as_bytes();
    let mut out = Vec::new();
    let pct: String = bytes
        .iter()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(b) {
                (*b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    if pct != value {
        out.push(pct);
    }
    out.push(bytes.iter().map(|b| format!("{b:02x}")).collect());
    for pad in 0..3usize {
        let mut shifted = vec![0u8; pad];
        shifted.extend_from_slice(bytes);
        let encoded = base64(&shifted);
        // Characters touching the prefix or the unknown next byte depend on neighbours.
        let skip = (pad * 4).div_ceil(3);
        let keep = (shifted.len() * 4) / 3;
        if keep > skip + 1 {
            let core = &encoded[skip..keep.saturating_sub(1)];
            out.push(core.to_string());
            out.push(core.replace('+', "-").replace('/', "_"));
        }
    }
    out
}

pub(crate) fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..=chunk.len() {
            out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

#[cfg(test)]
#[path = "scrub_tests.rs"]
mod tests;
