//! Tool receipts (issue 7 §6, STATE-20): every executed call gets an HMAC-SHA256 over the tool
//! name, the canonical JSON of its arguments, the SHA-256 of its result and the time, keyed by
//! 32 random bytes that live only in this process (a restart rotates the key). Stored with the
//! result in the session and the trace; [`ReceiptKey::verify`] checks in constant time.
//!
//! Format: `wr1-<unix secs>-<hex mac>`.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

type HmacSha256 = Hmac<Sha256>;

/// The per-process receipt key, kept as the HMAC state after the key block (the inner and
/// outer pads are hashed once per process, not once per receipt).
pub struct ReceiptKey(HmacSha256);

impl std::fmt::Debug for ReceiptKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReceiptKey([redacted])")
    }
}

impl ReceiptKey {
    /// A fresh random key.
    pub fn generate() -> Result<Self, getrandom::Error> {
        let mut key = [0u8; 32];
        getrandom::fill(&mut key)?;
        // `new_from_slice` accepts any key length for HMAC.
        let mac = match HmacSha256::new_from_slice(&key) {
            Ok(m) => m,
            Err(_) => unreachable_hmac(),
        };
        key.fill(0);
        Ok(Self(mac))
    }

    /// The MAC input is `tool | canonical_json(args) | sha256(result) | secs`; the canonical
    /// JSON is streamed into the MAC, never built as a string.
    fn mac(&self, tool: &str, args: &serde_json::Value, result: &str, secs: &[u8]) -> HmacSha256 {
        let mut mac = self.0.clone();
        mac.update(tool.as_bytes());
        mac.update(b"|");
        // The serializer writes a few bytes at a time and each MAC `update` has a fixed cost:
        // the canonical JSON goes in through a small buffer.
        let mut writer = std::io::BufWriter::with_capacity(128, &mut mac);
        write_canonical(args, &mut writer);
        // Flushing into a MAC cannot fail.
        let _ = std::io::Write::flush(&mut writer);
        drop(writer);
        mac.update(b"|");
        mac.update(&Sha256::digest(result.as_bytes()));
        mac.update(b"|");
        mac.update(secs);
        mac
    }

    /// The receipt of a call that returned `result` at `secs`.
    pub fn sign(&self, tool: &str, args: &serde_json::Value, result: &str, secs: i64) -> String {
        let mut digits = [0u8; 20];
        let secs = itoa(secs, &mut digits);
        let tag = self.mac(tool, args, result, secs).finalize().into_bytes();
        let mut out = String::with_capacity(4 + secs.len() + 1 + 2 * tag.len());
        out.push_str("wr1-");
        // ASCII digits and '-'.
        out.extend(secs.iter().map(|&b| char::from(b)));
        out.push('-');
        out.push_str(&warren_core::hex::encode(&tag));
        out
    }

    /// Whether `receipt` was issued by this key for exactly this call and result.
    pub fn verify(
        &self,
        receipt: &str,
        tool: &str,
        args: &serde_json::Value,
        result: &str,
    ) -> bool {
        let mut parts = receipt.splitn(3, '-');
        let (Some("wr1"), Some(secs), Some(hex)) = (parts.next(), parts.next(), parts.next())
        else {
            return false;
        };
        let Ok(secs) = secs.parse::<i64>() else {
            return false;
        };
        let Some(tag) = warren_core::hex::decode(hex) else {
            return false;
        };
        self.mac(tool, args, result, itoa(secs, &mut [0u8; 20]))
            .verify_slice(&tag)
            .is_ok()
    }
}

/// The decimal text of `n` in `buf` (what `n.to_string()` gives, without the allocation).
fn itoa(n: i64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    let mut v = n.unsigned_abs();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    if n < 0 {
        i -= 1;
        buf[i] = b'-';
    }
    &buf[i..]
}

/// Writes the text [`canonical_json`] returns for `v` (compact, object keys sorted at every
/// level) to `w`.
fn write_canonical(v: &serde_json::Value, w: &mut impl std::io::Write) {
    use serde_json::Value;
    // Writing to a MAC or a Vec cannot fail, and a `Value` always serialises.
    match v {
        Value::Object(m) => {
            let _ = w.write_all(b"{");
            let mut entry = |i: usize, k: &String, v: &Value| {
                if i > 0 {
                    let _ = w.write_all(b",");
                }
                let _ = serde_json::to_writer(&mut *w, k);
                let _ = w.write_all(b":");
                write_canonical(v, w);
            };
            if m.keys().is_sorted() {
                // serde_json's map is already ordered by key unless `preserve_order` is on.
                for (i, (k, v)) in m.iter().enumerate() {
                    entry(i, k, v);
                }
            } else {
                let mut sorted: Vec<_> = m.iter().collect();
                sorted.sort_by(|a, b| a.0.cmp(b.0));
                for (i, (k, v)) in sorted.into_iter().enumerate() {
                    entry(i, k, v);
                }
            }
            let _ = w.write_all(b"}");
        }
        Value::Array(a) => {
            let _ = w.write_all(b"[");
            for (i, v) in a.iter().enumerate() {
                if i > 0 {
                    let _ = w.write_all(b",");
                }
                write_canonical(v, w);
            }
            let _ = w.write_all(b"]");
        }
        scalar => {
            let _ = serde_json::to_writer(&mut *w, scalar);
        }
    }
}

fn unreachable_hmac() -> ! {
    // HMAC takes keys of any length; this cannot happen.
    panic!("HMAC rejected a 32-byte key")
}

/// JSON with object keys sorted at every level (serde_json's map is ordered by key unless the
/// `preserve_order` feature is on; sorting here keeps receipts stable either way).
pub fn canonical_json(v: &serde_json::Value) -> String {
    let mut out = Vec::new();
    write_canonical(v, &mut out);
    String::from_utf8(out).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn receipts_verify_and_any_change_breaks_them() {
        let key = ReceiptKey::generate().unwrap_or_else(|e| panic!("{e}"));
        let args = json!({"path": "a.md", "content": "x"});
        let r = key.sign("file_write", &args, "ok", 1_700_000_000);
        assert!(key.verify(
            &r,
            "file_write",
            &json!({"content": "x", "path": "a.md"}),
            "ok"
        ));
        assert!(!key.verify(&r, "file_write", &args, "ok!"));
        assert!(!key.verify(&r, "file_read", &args, "ok"));
        assert!(!key.verify(
            &r,
            "file_write",
            &json!({"path": "b.md", "content": "x"}),
            "ok"
        ));
        let other = ReceiptKey::generate().unwrap_or_else(|e| panic!("{e}"));
        assert!(
            !other.verify(&r, "file_write", &args, "ok"),
            "another process's key"
        );
        assert!(!key.verify("wr1-1-zz", "file_write", &args, "ok"));
    }

    /// The streamed MAC input is byte for byte the documented one: HMAC-SHA256 over
    /// `tool|canonical args|sha256(result)|secs` with keys sorted at every level.
    #[test]
    fn receipt_mac_input_is_the_documented_canonical_form() {
        let mut key = [0u8; 32];
        key[0] = 7;
        let receipts =
            ReceiptKey(HmacSha256::new_from_slice(&key).unwrap_or_else(|_| unreachable_hmac()));
        let args =
            json!({"z": [1, {"b": "q\"\u{1}", "a": null}], "a": 1.5, "m": {"y": true, "x": -3}});
        assert_eq!(
            canonical_json(&args),
            r#"{"a":1.5,"m":{"x":-3,"y":true},"z":[1,{"a":null,"b":"q\"\u0001"}]}"#
        );
        // Small arguments, and ones that overflow the MAC writer's 128-byte buffer once (one
        // long string) and many times (many entries).
        let long = "l".repeat(300);
        let many: serde_json::Map<String, serde_json::Value> =
            (0..60).map(|i| (format!("k{i}"), json!(i))).collect();
        for args in [
            args,
            json!({"content": long}),
            serde_json::Value::Object(many),
        ] {
            let mut reference =
                HmacSha256::new_from_slice(&key).unwrap_or_else(|_| unreachable_hmac());
            reference.update(b"file_write|");
            reference.update(canonical_json(&args).as_bytes());
            reference.update(b"|");
            reference.update(&Sha256::digest(b"result"));
            reference.update(b"|1700000000");
            let hex: String = reference
                .finalize()
                .into_bytes()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            assert_eq!(
                receipts.sign("file_write", &args, "result", 1_700_000_000),
                format!("wr1-1700000000-{hex}")
            );
        }
        assert_eq!(
            itoa(i64::MIN, &mut [0u8; 20]),
            i64::MIN.to_string().as_bytes()
        );
        assert_eq!(itoa(0, &mut [0u8; 20]), b"0");
    }
}
