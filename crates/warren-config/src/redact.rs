//! The one secret redactor (CFG-6, STATE-13): every error, log line, trace event and
//! `warren logs` output that may quote a secret passes through [`Redactor::redact`].
//!
//! What counts as leaked: any run of 8 or more bytes of a configured secret, wherever it
//! starts or ends in the secret. So the key without its `sk-` prefix, its last 12 characters,
//! the key minus one character and the key after `Bearer ` are all caught, and the whole
//! maximal run is replaced by `[redacted]` (adjacent runs merge). Secrets shorter than 8 bytes
//! are replaced where they occur whole; secrets shorter than [`MIN_SECRET`] bytes protect
//! nothing and are ignored (they would shred every message).
//!
//! Connection URLs are secret only in their password: `postgres://bob:pw@db/x` registers `pw`
//! (and its percent-decoded form), replaced by `***`, so messages keep naming the server
//! (`postgres://bob:***@db/x`). The same holds for `password=` in key/value DSNs and query
//! strings.
//!
//! Cost: every 8-byte window of every secret is indexed once (a hash map keyed by the window
//! as a `u64`); a text is scanned with one lookup per byte and extended only where a window
//! hits, so redacting is linear in the text for ordinary secrets.

use std::borrow::Cow;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::schema::Config;

/// Bytes of a secret that make a leak when they appear in a row.
pub const WINDOW: usize = 8;
/// Secrets shorter than this are not redacted at all.
pub const MIN_SECRET: usize = 4;
/// What replaces a secret.
pub const REDACTED: &str = "[redacted]";
/// What replaces a password inside a connection URL.
pub const MASKED_PASSWORD: &str = "***";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Marker {
    Redacted,
    Password,
}

impl Marker {
    fn text(self) -> &'static str {
        match self {
            Marker::Redacted => REDACTED,
            Marker::Password => MASKED_PASSWORD,
        }
    }
}

#[derive(Debug, Clone)]
struct Entry {
    bytes: Vec<u8>,
    marker: Marker,
}

/// Hashes an 8-byte window (already a `u64`) with one multiply: the keys are secret bytes,
/// which are spread enough that a cryptographic hash buys nothing here.
#[derive(Default)]
struct WindowHasher(u64);

impl Hasher for WindowHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 =
                (self.0.rotate_left(5) ^ u64::from(*b)).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (n ^ (n >> 29)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

type WindowMap = HashMap<u64, Vec<(u32, u32)>, BuildHasherDefault<WindowHasher>>;

/// Redacts configured secrets, and every 8-byte run of them, from text.
#[derive(Clone, Default)]
pub struct Redactor {
    entries: Vec<Entry>,
    /// Window → (entry, offset of the window in the entry).
    windows: WindowMap,
    /// Entries shorter than [`WINDOW`], matched whole.
    short: Vec<u32>,
    /// Whole connection URLs and their masked display form, replaced first.
    masks: Vec<(String, String)>,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redactor")
            .field("secrets", &self.entries.len())
            .finish_non_exhaustive()
    }
}

fn window_at(bytes: &[u8], at: usize) -> Option<u64> {
    let w: [u8; WINDOW] = bytes.get(at..at + WINDOW)?.try_into().ok()?;
    Some(u64::from_le_bytes(w))
}

impl Redactor {
    /// A redactor for `secrets` (plain values; connection URLs are reduced to their password).
    pub fn new<I, S>(secrets: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut r = Self::default();
        for s in secrets {
            r.add(s.as_ref());
        }
        r
    }

    /// The redactor of a config: every secret field (decrypted), and the value of every
    /// environment variable a provider's `api_key_env` names.
    pub fn from_config(config: &Config) -> Self {
        let mut r = Self::default();
        r.add_config(config);
        r
    }

    /// Adds the secrets of `config` (see [`Redactor::from_config`]).
    pub fn add_config(&mut self, config: &Config) {
        let mut config = config.clone();
        for (_, secret) in config.secrets_mut() {
            self.add(secret.expose());
        }
        for provider in config.providers.values() {
            if let Some(value) = provider
                .api_key_env
                .as_deref()
                .and_then(|var| std::env::var(var).ok())
            {
                self.add(&value);
            }
        }
    }

    /// Adds one secret. A connection URL or DSN adds only its passwords, and its exact text
    /// is shown masked ([`mask_url`]) wherever it appears.
    pub fn add(&mut self, secret: &str) {
        if !looks_like_connection(secret) {
            self.add_entry(secret.as_bytes(), Marker::Redacted);
            return;
        }
        let ranges = password_ranges(secret);
        if ranges.is_empty() {
            return; // no password: nothing in it is secret
        }
        if !self.masks.iter().any(|(full, _)| full == secret) {
            self.masks.push((secret.to_string(), mask_url(secret)));
        }
        for range in ranges {
            let password = &secret[range];
            self.add_entry(password.as_bytes(), Marker::Password);
            let decoded = percent_decode(password);
            if decoded != password {
                self.add_entry(decoded.as_bytes(), Marker::Password);
            }
        }
    }

    /// Adds `text` as one secret exactly as given (no connection-URL reading): for callers
    /// that register forms derived from secrets already added (`warren-runtime`'s scrubber).
    pub fn add_literal(&mut self, text: &str) {
        self.add_entry(text.as_bytes(), Marker::Redacted);
    }

    /// The secret byte strings this redactor looks for (passwords of connection URLs, not the
    /// URLs), in the order added.
    pub fn values(&self) -> impl Iterator<Item = &[u8]> {
        self.entries.iter().map(|e| e.bytes.as_slice())
    }

    /// The byte ranges of `bytes` this redactor would replace (not merged, not aligned to
    /// characters: `bytes` need not be UTF-8). For matching on a decoded view of a text.
    pub fn find(&self, bytes: &[u8]) -> Vec<std::ops::Range<usize>> {
        self.raw_spans(bytes)
            .into_iter()
            .map(|(start, end, _)| start..end)
            .collect()
    }

    fn add_entry(&mut self, bytes: &[u8], marker: Marker) {
        if bytes.len() < MIN_SECRET || self.entries.iter().any(|e| e.bytes == bytes) {
            return;
        }
        let Ok(index) = u32::try_from(self.entries.len()) else {
            return;
        };
        if bytes.len() < WINDOW {
            self.short.push(index);
        } else {
            for at in 0..=bytes.len() - WINDOW {
                if let (Some(w), Ok(offset)) = (window_at(bytes, at), u32::try_from(at)) {
                    self.windows.entry(w).or_default().push((index, offset));
                }
            }
        }
        self.entries.push(Entry {
            bytes: bytes.to_vec(),
            marker,
        });
    }

    /// Whether there is nothing to redact.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.masks.is_empty()
    }

    /// `text` with every leaked run replaced (borrowed when nothing matched).
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        if self.is_empty() || text.len() < MIN_SECRET {
            return Cow::Borrowed(text);
        }
        let mut text = Cow::Borrowed(text);
        for (full, shown) in &self.masks {
            if text.contains(full.as_str()) {
                text = Cow::Owned(text.replace(full.as_str(), shown));
            }
        }
        let spans = self.spans(&text);
        if spans.is_empty() {
            return text;
        }
        let mut out = String::with_capacity(text.len());
        let mut at = 0;
        for (start, end, marker) in spans {
            out.push_str(&text[at..start]);
            out.push_str(marker.text());
            at = end;
        }
        out.push_str(&text[at..]);
        Cow::Owned(out)
    }

    /// Redacts `text` in place; returns whether anything changed.
    pub fn redact_in_place(&self, text: &mut String) -> bool {
        match self.redact(text) {
            Cow::Borrowed(_) => false,
            Cow::Owned(s) => {
                *text = s;
                true
            }
        }
    }

    /// Whether `text` holds anything this redactor would replace.
    pub fn leaks(&self, text: &str) -> bool {
        matches!(self.redact(text), Cow::Owned(_))
    }

    /// Merged, char-aligned spans to replace, in order.
    fn spans(&self, text: &str) -> Vec<(usize, usize, Marker)> {
        let mut raw = self.raw_spans(text.as_bytes());
        raw.sort_unstable_by_key(|&(start, end, _)| (start, std::cmp::Reverse(end)));
        let mut merged: Vec<(usize, usize, Marker)> = Vec::with_capacity(raw.len());
        for (mut start, mut end, marker) in raw {
            while !text.is_char_boundary(start) {
                start -= 1;
            }
            while !text.is_char_boundary(end) {
                end += 1;
            }
            match merged.last_mut() {
                Some(last) if start <= last.1 => {
                    last.1 = last.1.max(end);
                    if marker == Marker::Redacted {
                        last.2 = Marker::Redacted;
                    }
                }
                _ => merged.push((start, end, marker)),
            }
        }
        merged
    }

    /// Every maximal window-extended run and every whole short secret in `t`, unordered.
    fn raw_spans(&self, t: &[u8]) -> Vec<(usize, usize, Marker)> {
        let mut raw: Vec<(usize, usize, Marker)> = Vec::new();
        if t.len() >= WINDOW && !self.windows.is_empty() {
            // End of the furthest match so far: a window inside it matters only if it can
            // reach further.
            let mut covered = 0;
            for i in 0..=t.len() - WINDOW {
                let Some(cands) = window_at(t, i).and_then(|w| self.windows.get(&w)) else {
                    continue;
                };
                let mut best: Option<(usize, Marker)> = None;
                for &(entry, offset) in cands {
                    let (Some(e), Ok(offset)) =
                        (self.entries.get(entry as usize), usize::try_from(offset))
                    else {
                        continue;
                    };
                    let rest = e.bytes.len() - offset;
                    if i + rest <= covered || best.is_some_and(|(end, _)| i + rest <= end) {
                        continue;
                    }
                    let mut k = WINDOW;
                    while k < rest && t.get(i + k) == e.bytes.get(offset + k) {
                        k += 1;
                    }
                    if best.is_none_or(|(end, _)| i + k > end) {
                        best = Some((i + k, e.marker));
                    }
                }
                if let Some((end, marker)) = best {
                    raw.push((i, end, marker));
                    covered = covered.max(end);
                }
            }
        }
        for &index in &self.short {
            let Some(e) = self.entries.get(index as usize) else {
                continue;
            };
            let n = e.bytes.len();
            raw.extend(
                t.windows(n)
                    .enumerate()
                    .filter(|(_, w)| *w == e.bytes.as_slice())
                    .map(|(at, _)| (at, at + n, e.marker)),
            );
        }
        raw
    }
}

/// Whether `s` is a URL with a scheme (`postgres://...`) or a `key=value` DSN.
fn looks_like_connection(s: &str) -> bool {
    let Some((scheme, _)) = s.split_once("://") else {
        return is_kv_dsn(s);
    };
    !scheme.is_empty()
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

/// `host=db user=bob password=...`: every word is `key=value` and one key is a libpq one.
fn is_kv_dsn(s: &str) -> bool {
    const KEYS: &[&str] = &["host", "hostaddr", "port", "user", "dbname", "password"];
    let mut known = false;
    let all_pairs = s.split_whitespace().all(|w| match w.split_once('=') {
        Some((k, _)) if !k.is_empty() => {
            known |= KEYS.iter().any(|key| k.eq_ignore_ascii_case(key));
            true
        }
        _ => false,
    });
    all_pairs && known
}

/// Byte ranges of the passwords inside a connection URL or DSN: the userinfo password
/// (everything between the first `:` after `://` and the last `@`, so an unencoded `/` or `@`
/// in it stays inside) and every `password=` value of the query or the key/value form.
fn password_ranges(s: &str) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    if !looks_like_connection(s) {
        return out;
    }
    if let Some(scheme_end) = s.find("://").map(|i| i + 3)
        && let Some(at) = s[scheme_end..].rfind('@').map(|i| i + scheme_end)
        && let Some(colon) = s[scheme_end..at].find(':').map(|i| i + scheme_end)
        && colon + 1 < at
    {
        out.push(colon + 1..at);
    }
    let bytes = s.as_bytes();
    let mut i = 0;
    while let Some(found) = s[i..].to_ascii_lowercase().find("password=").map(|f| f + i) {
        let starts_key =
            found == 0 || matches!(bytes[found - 1], b'?' | b'&' | b' ' | b'\t' | b'\n');
        let mut start = found + "password=".len();
        i = start;
        if !starts_key {
            continue;
        }
        let end = if bytes.get(start) == Some(&b'\'') {
            start += 1;
            s[start..].find('\'').map_or(s.len(), |e| e + start)
        } else {
            s[start..]
                .find(['&', ' ', '\t', '\n', '#'])
                .map_or(s.len(), |e| e + start)
        };
        if end > start
            && !out
                .iter()
                .any(|r: &std::ops::Range<usize>| r.start <= start && end <= r.end)
        {
            out.push(start..end);
        }
        i = end.max(i);
    }
    out.sort_by_key(|r| r.start);
    out
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && let Some(byte) = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(byte);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap_or_else(|_| s.to_string())
}

/// A connection URL or DSN for display: every password in it as `***`
/// (`postgres://bob:***@db/warren`). Other text comes back unchanged.
pub fn mask_url(url: &str) -> String {
    let mut out = url.to_string();
    for range in password_ranges(url).into_iter().rev() {
        out.replace_range(range, MASKED_PASSWORD);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    const KEY: &str = "sk-proj-4fQx9ZkLmN2pR7sT1vWy3bCd";

    fn r() -> Redactor {
        Redactor::new([KEY])
    }

    /// Every derived form a server or a log might show: none survives.
    #[test]
    fn derived_forms_of_a_key_are_redacted_cfg6() {
        let r = r();
        let forms = [
            KEY.to_string(),
            KEY.trim_start_matches("sk-").to_string(),
            KEY.trim_start_matches("sk-proj-").to_string(),
            KEY[KEY.len() - 12..].to_string(),
            KEY[..KEY.len() - 1].to_string(),
            KEY[1..].to_string(),
            KEY[5..13].to_string(),
            format!("Bearer {KEY}"),
            format!("Bearer {}", &KEY[3..]),
        ];
        for form in &forms {
            let text = format!("Incorrect API key provided: {form}. See docs.");
            let out = r.redact(&text);
            for len in WINDOW..=KEY.len() {
                for start in 0..=KEY.len() - len {
                    let piece = &KEY[start..start + len];
                    assert!(!out.contains(piece), "{piece:?} survived in {out:?}");
                }
            }
            assert!(out.starts_with("Incorrect API key provided: "), "{out}");
            assert!(out.ends_with(". See docs."), "{out}");
            assert!(out.contains(REDACTED), "{out}");
        }
        // The maximal run is replaced once, prefix included.
        assert_eq!(r.redact(&format!("key={KEY};")), format!("key={REDACTED};"));
        assert_eq!(
            r.redact(&format!("a {} b", &KEY[3..])),
            format!("a {REDACTED} b")
        );
    }

    #[test]
    fn runs_shorter_than_the_window_stay_and_unrelated_text_is_borrowed() {
        let r = r();
        let seven = format!("tail {}", &KEY[KEY.len() - 7..]);
        assert!(
            matches!(r.redact(&seven), Cow::Borrowed(_)),
            "7 bytes is below the window"
        );
        assert!(r.leaks(&format!("tail {}", &KEY[KEY.len() - 8..])));
        assert!(matches!(r.redact("nothing here at all"), Cow::Borrowed(_)));
        assert!(Redactor::default().is_empty());
    }

    #[test]
    fn adjacent_and_overlapping_runs_of_two_secrets_merge() {
        let r = Redactor::new(["aaaaBBBBccccDDDD", "ccccDDDDeeeeFFFF"]);
        assert_eq!(r.redact("x aaaaBBBBccccDDDDeeeeFFFF y"), "x [redacted] y");
        assert_eq!(
            r.redact("BBBBccccDDDD and eeeeFFFF"),
            "[redacted] and [redacted]"
        );
    }

    #[test]
    fn short_secrets_are_redacted_whole_and_tiny_ones_ignored() {
        let r = Redactor::new(["hunter2", "ab", ""]);
        assert_eq!(r.redact("pw hunter2!"), "pw [redacted]!");
        assert_eq!(r.redact("hunter ab"), "hunter ab");
    }

    #[test]
    fn connection_urls_show_the_server_but_never_the_password_cfg6() {
        for (url, shown) in [
            (
                "postgres://bob:s3cret-Passw0rd@db:5432/warren",
                "postgres://bob:***@db:5432/warren",
            ),
            // An unencoded '/' or '@' in the password stays inside it.
            (
                "postgres://bob:pa/ss@word-long@db/warren",
                "postgres://bob:***@db/warren",
            ),
            (
                "postgresql://bob@db/warren?sslmode=require&password=s3cretpass",
                "postgresql://bob@db/warren?sslmode=require&password=***",
            ),
            (
                "host=db user=bob password=s3cretpass dbname=w",
                "host=db user=bob password=*** dbname=w",
            ),
            ("postgres://bob:pw@db/w", "postgres://bob:***@db/w"),
        ] {
            assert_eq!(mask_url(url), shown);
        }
        // A URL without a password holds nothing secret.
        let r = Redactor::new(["postgres://bob@db/warren"]);
        assert!(r.is_empty());
        // The password alone (or a piece of it, or its decoded form) elsewhere is masked too.
        let r = Redactor::new(["postgres://bob:s3cret%2Fpassword@db/w"]);
        assert_eq!(
            r.redact("auth failed for s3cret/password and s3cret%2Fpass"),
            "auth failed for *** and ***"
        );
    }

    #[test]
    fn multibyte_text_keeps_char_boundaries() {
        let r = Redactor::new(["ééééééé-secret"]);
        let out = r.redact("→ éééé-secret ←");
        assert_eq!(out, "→ [redacted] ←");
        let r = Redactor::new(["xé12345678"]);
        assert_eq!(r.redact("é12345678"), "[redacted]");
    }

    #[test]
    fn config_secrets_and_env_keys_are_covered() {
        let mut config = Config::default();
        config.providers.insert(
            "p".into(),
            crate::schema::ProviderConfig {
                api_key: Some(crate::Secret::new("sk-config-key-0123456789")),
                ..Default::default()
            },
        );
        // PATH is always set: stands in for a provider key read from the environment.
        let path = std::env::var("PATH").unwrap_or_default();
        config.providers.insert(
            "q".into(),
            crate::schema::ProviderConfig {
                api_key_env: Some("PATH".into()),
                ..Default::default()
            },
        );
        config.memory.postgres.url = Some(crate::Secret::new("postgres://u:pgpassword1@h/d"));
        let r = Redactor::from_config(&config);
        let text = format!("config-key-0123 {path} postgres://u:pgpassword1@h/d");
        let out = r.redact(&text);
        assert!(!out.contains("config-key-0123"), "{out}");
        assert!(path.len() < WINDOW || !out.contains(&path), "{out}");
        assert!(out.ends_with("postgres://u:***@h/d"), "{out}");
    }

    #[test]
    fn a_long_text_is_scanned_in_linear_time() {
        let r = Redactor::new((0..50).map(|i| format!("secret-number-{i:04}-abcdefghijkl")));
        let mut text = "lorem ipsum dolor sit amet ".repeat(40_000);
        text.push_str("secret-number-0042-abcdefghij");
        let started = std::time::Instant::now();
        let out = r.redact(&text);
        assert!(out.ends_with(REDACTED));
        assert!(
            started.elapsed() < std::time::Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
    }
}
