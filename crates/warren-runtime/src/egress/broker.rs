//! The credential broker (issue 24 §2, CFG-6): `{{secret:NAME}}` in an `http_request`'s URL or
//! headers is replaced by the value of `[secrets.NAME]`, in the daemon, and only when the
//! request goes to one of that secret's `hosts`. The model writes and sees only the
//! placeholder; the session, the trace and memory hold what the model wrote.
//!
//! Everything that returns to the agent (status line, headers, body, errors) is scrubbed first
//! by [`Broker::scrub`]: the one config redactor ([`warren_config::Redactor`]: any run of 8+
//! bytes of a secret) extended with the forms a server may echo a secret in — percent-encoded,
//! hex, and base64 at each of the three alignments (so `Authorization: Basic` echoes and base64
//! JSON dumps are caught).

use warren_config::{Config, Redactor};

use super::allow::Allowlist;

/// One `[secrets.<name>]` the broker may substitute.
struct Brokered {
    name: String,
    value: warren_config::Secret,
    hosts: Allowlist,
}

/// The install's brokered secrets and the scrubber of their values.
pub struct Broker {
    secrets: Vec<Brokered>,
    scrubber: Redactor,
}

impl std::fmt::Debug for Broker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Broker")
            .field(
                "secrets",
                &self.secrets.iter().map(|s| &s.name).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

const OPEN: &str = "{{secret:";
const CLOSE: &str = "}}";

impl Broker {
    /// The broker of `config`'s `[secrets.*]` (values decrypted when the config was loaded).
    /// A secret whose `hosts` entry does not parse is an error naming it.
    pub fn from_config(config: &Config) -> Result<Self, String> {
        let mut scrubber = Redactor::from_config(config);
        let mut secrets = Vec::new();
        for (name, s) in &config.secrets {
            let hosts = Allowlist::parse(&s.hosts).map_err(|e| format!("[secrets.{name}]: {e}"))?;
            for form in derived_forms(s.value.expose()) {
                scrubber.add(&form);
            }
            secrets.push(Brokered {
                name: name.clone(),
                value: s.value.clone(),
                hosts,
            });
        }
        Ok(Self { secrets, scrubber })
    }

    /// `text` with each `{{secret:NAME}}` replaced by its value, for a request to
    /// `host:port`. Refused (naming the secret and its hosts, never the value) when NAME is
    /// unknown or `host` is not one of its hosts.
    pub fn substitute(&self, text: &str, host: &str, port: u16) -> Result<String, String> {
        if !text.contains(OPEN) {
            return Ok(text.to_string());
        }
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(at) = rest.find(OPEN) {
            out.push_str(&rest[..at]);
            let after = &rest[at + OPEN.len()..];
            let Some(end) = after.find(CLOSE) else {
                return Err("an unterminated {{secret:...}} placeholder".into());
            };
            let name = after[..end].trim();
            let secret = self
                .secrets
                .iter()
                .find(|s| s.name == name)
                .ok_or_else(|| {
                    format!("no secret named '{name}' (set [secrets.{name}] value and hosts in config.toml)")
                })?;
            if !secret.hosts.allows(host, port) {
                return Err(format!(
                    "secret '{name}' may be sent only to [{}] ([secrets.{name}] hosts), not to {host}:{port}",
                    secret.hosts.describe()
                ));
            }
            out.push_str(secret.value.expose());
            rest = &after[end + CLOSE.len()..];
        }
        out.push_str(rest);
        Ok(out)
    }

    /// `text` without any secret value or derived form.
    pub fn scrub(&self, text: &str) -> String {
        self.scrubber.redact(text).into_owned()
    }

    /// The secrets usable for `host:port` (names only).
    pub fn usable_for(&self, host: &str, port: u16) -> Vec<String> {
        self.secrets
            .iter()
            .filter(|s| s.hosts.allows(host, port))
            .map(|s| s.name.clone())
            .collect()
    }

    /// Every brokered secret's name and hosts as written (the audit).
    pub fn hosts(&self) -> Vec<(String, Vec<String>)> {
        self.secrets
            .iter()
            .map(|s| (s.name.clone(), s.hosts.entries().to_vec()))
            .collect()
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

fn base64(bytes: &[u8]) -> String {
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
mod tests {
    use super::*;
    use warren_config::schema::NamedSecret;

    fn broker() -> Broker {
        let mut config = Config::default();
        config.secrets.insert(
            "gh".into(),
            NamedSecret {
                value: warren_config::Secret::new("ghp_s3cr3tTOKENvalue42"),
                hosts: vec!["api.github.com".into()],
            },
        );
        Broker::from_config(&config).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn placeholders_are_filled_only_for_the_secrets_hosts() {
        let b = broker();
        assert_eq!(
            b.substitute("token {{secret:gh}}", "api.github.com", 443)
                .as_deref(),
            Ok("token ghp_s3cr3tTOKENvalue42")
        );
        let refused = b.substitute("{{secret:gh}}", "evil.example", 443);
        assert!(
            refused
                .as_ref()
                .is_err_and(|e| e.contains("api.github.com") && !e.contains("s3cr3t")),
            "{refused:?}"
        );
        assert!(
            b.substitute("{{secret:nope}}", "api.github.com", 443)
                .is_err()
        );
        assert_eq!(b.substitute("plain", "x", 1).as_deref(), Ok("plain"));
    }

    #[test]
    fn echoed_values_and_derived_forms_are_scrubbed() {
        let b = broker();
        let basic = base64(b"user:ghp_s3cr3tTOKENvalue42");
        for text in [
            "echo: ghp_s3cr3tTOKENvalue42".to_string(),
            format!("auth: Basic {basic}"),
            format!("b64: {}", base64(b"ghp_s3cr3tTOKENvalue42")),
            format!(
                "hex: {}",
                "ghp_s3cr3tTOKENvalue42"
                    .bytes()
                    .map(|b| format!("{b:02x}"))
                    .collect::<String>()
            ),
        ] {
            let out = b.scrub(&text);
            assert!(out.contains("[redacted]"), "{text} -> {out}");
            assert!(!out.contains("s3cr3t"), "{out}");
        }
        assert_eq!(base64(b"Man"), "TWFu");
        assert_eq!(base64(b"Ma"), "TWE");
    }
}
