//! Tool receipts (issue 7 §6, STATE-20): every executed call gets an HMAC-SHA256 over the tool
//! name, the canonical JSON of its arguments, the SHA-256 of its result and the time, keyed by
//! 32 random bytes that live only in this process (a restart rotates the key). Stored with the
//! result in the session and the trace; [`ReceiptKey::verify`] checks in constant time.
//!
//! Format: `wr1-<unix secs>-<hex mac>`.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

type HmacSha256 = Hmac<Sha256>;

/// The per-process receipt key.
pub struct ReceiptKey([u8; 32]);

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
        Ok(Self(key))
    }

    fn mac(&self, tool: &str, args: &serde_json::Value, result: &str, secs: i64) -> HmacSha256 {
        // `new_from_slice` accepts any key length for HMAC.
        let mut mac = match HmacSha256::new_from_slice(&self.0) {
            Ok(m) => m,
            Err(_) => unreachable_hmac(),
        };
        mac.update(tool.as_bytes());
        mac.update(b"|");
        mac.update(canonical_json(args).as_bytes());
        mac.update(b"|");
        mac.update(&Sha256::digest(result.as_bytes()));
        mac.update(b"|");
        mac.update(secs.to_string().as_bytes());
        mac
    }

    /// The receipt of a call that returned `result` at `secs`.
    pub fn sign(&self, tool: &str, args: &serde_json::Value, result: &str, secs: i64) -> String {
        let tag = self.mac(tool, args, result, secs).finalize().into_bytes();
        let hex: String = tag.iter().map(|b| format!("{b:02x}")).collect();
        format!("wr1-{secs}-{hex}")
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
        let Some(tag) = decode_hex(hex) else {
            return false;
        };
        self.mac(tool, args, result, secs)
            .verify_slice(&tag)
            .is_ok()
    }
}

fn unreachable_hmac() -> ! {
    // HMAC takes keys of any length; this cannot happen.
    panic!("HMAC rejected a 32-byte key")
}

fn decode_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// JSON with object keys sorted at every level (serde_json's map is ordered by key unless the
/// `preserve_order` feature is on; sorting here keeps receipts stable either way).
pub fn canonical_json(v: &serde_json::Value) -> String {
    use serde_json::Value;
    fn canon(v: &Value) -> Value {
        match v {
            Value::Object(m) => {
                let mut keys: Vec<_> = m.keys().collect();
                keys.sort();
                Value::Object(
                    keys.into_iter()
                        .map(|k| (k.clone(), canon(&m[k])))
                        .collect(),
                )
            }
            Value::Array(a) => Value::Array(a.iter().map(canon).collect()),
            other => other.clone(),
        }
    }
    canon(v).to_string()
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
}
