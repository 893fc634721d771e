//! The credential broker (issue 24 §2, CFG-6): `{{secret:NAME}}` in an `http_request`'s URL or
//! headers is replaced by the value of `[secrets.NAME]`, in the daemon, and only when the
//! request goes to one of that secret's `hosts`, over `https` unless the entry names `http://`
//! (issue 35 §3). The model writes and sees only the placeholder; the session, the trace and
//! memory hold what the model wrote. A request that carried a secret follows a redirect only to
//! a destination every secret it carried may go to ([`Broker::carried`], [`Broker::may_carry`]).
//!
//! Everything that returns to the agent (status line, headers, body, errors) is scrubbed first
//! by [`Broker::scrub`]: the [`Scrubber`] of every configured secret (issue 35 §5).

use warren_config::Config;
use warren_config::schema::secret_host_scheme;

use super::allow::Allowlist;
use super::error::{EgressConfigError, SecretRefused};
use super::scrub::Scrubber;

/// One `[secrets.<name>]` the broker may substitute.
struct Brokered {
    name: String,
    value: warren_config::Secret,
    hosts: Allowlist,
    /// The entries written `http://...`: where the value may also go over plain HTTP.
    plain: Allowlist,
    /// `hosts` as written in the config (schemes included).
    written: Vec<String>,
}

impl Brokered {
    /// Whether the value may go to `host:port` over `https` (or plain HTTP when `!https`).
    fn allows(&self, host: &str, port: u16, https: bool) -> bool {
        if https {
            self.hosts.allows(host, port)
        } else {
            self.plain.allows(host, port)
        }
    }

    /// The entries as written (schemes included), for messages.
    fn describe(&self) -> String {
        self.written
            .iter()
            .map(|r| format!("\"{r}\""))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The install's brokered secrets and the scrubber of their values.
pub struct Broker {
    secrets: Vec<Brokered>,
    scrubber: Scrubber,
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
    pub fn from_config(config: &Config) -> Result<Self, EgressConfigError> {
        let mut secrets = Vec::new();
        for (name, s) in &config.secrets {
            let split: Vec<(&str, bool)> = s.hosts.iter().map(|h| secret_host_scheme(h)).collect();
            let all: Vec<String> = split.iter().map(|(h, _)| h.to_string()).collect();
            let plain: Vec<String> = split
                .iter()
                .filter(|(_, http)| *http)
                .map(|(h, _)| h.to_string())
                .collect();
            let parse = |list: &[String]| {
                Allowlist::parse(list).map_err(|cause| EgressConfigError::SecretHosts {
                    name: name.clone(),
                    cause,
                })
            };
            secrets.push(Brokered {
                name: name.clone(),
                value: s.value.clone(),
                hosts: parse(&all)?,
                plain: parse(&plain)?,
                written: s.hosts.clone(),
            });
        }
        Ok(Self {
            secrets,
            scrubber: Scrubber::from_config(config),
        })
    }

    /// `text` with each `{{secret:NAME}}` replaced by its value, for a request to
    /// `host:port` over `https` (or plain HTTP). Refused (naming the secret and its hosts, never
    /// the value) when NAME is unknown, `host` is not one of its hosts, or the request is plain
    /// HTTP and no entry of its hosts names `http://` for it.
    pub fn substitute(
        &self,
        text: &str,
        host: &str,
        port: u16,
        https: bool,
    ) -> Result<String, SecretRefused> {
        if !text.contains(OPEN) {
            return Ok(text.to_string());
        }
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(at) = rest.find(OPEN) {
            out.push_str(&rest[..at]);
            let after = &rest[at + OPEN.len()..];
            let Some(end) = after.find(CLOSE) else {
                return Err(SecretRefused::Unterminated);
            };
            let name = after[..end].trim();
            let secret = self
                .secrets
                .iter()
                .find(|s| s.name == name)
                .ok_or_else(|| SecretRefused::Unknown { name: name.into() })?;
            if !secret.hosts.allows(host, port) {
                return Err(SecretRefused::NotForHost {
                    name: name.into(),
                    hosts: secret.describe(),
                    host: host.into(),
                    port,
                });
            }
            if !secret.allows(host, port, https) {
                return Err(SecretRefused::HttpsOnly {
                    name: name.into(),
                    host: host.into(),
                    port,
                });
            }
            out.push_str(secret.value.expose());
            rest = &after[end + CLOSE.len()..];
        }
        out.push_str(rest);
        Ok(out)
    }

    /// The names of the secrets whose placeholders `texts` hold (each once).
    pub fn carried<'a>(&self, texts: impl IntoIterator<Item = &'a str>) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        for text in texts {
            let mut rest = text;
            while let Some(at) = rest.find(OPEN) {
                let after = &rest[at + OPEN.len()..];
                let Some(end) = after.find(CLOSE) else { break };
                let name = after[..end].trim().to_string();
                if !names.contains(&name) {
                    names.push(name);
                }
                rest = &after[end + CLOSE.len()..];
            }
        }
        names
    }

    /// Whether a request that carried the secrets `names` may go on to `host:port` (a
    /// redirect's destination, issue 35 §3): every one of them may be sent there, by the same
    /// rule as a placeholder (scheme included). The error names the first that may not.
    pub fn may_carry(
        &self,
        names: &[String],
        host: &str,
        port: u16,
        https: bool,
    ) -> Result<(), SecretRefused> {
        for name in names {
            let Some(secret) = self.secrets.iter().find(|s| s.name == *name) else {
                continue; // an unknown name was refused when it was substituted
            };
            if !secret.allows(host, port, https) {
                return Err(SecretRefused::Carried {
                    name: name.clone(),
                    hosts: secret.describe(),
                    scheme: if https { "https" } else { "http" },
                    host: host.into(),
                    port,
                });
            }
        }
        Ok(())
    }

    /// `text` without any secret value or derived form (see [`Scrubber`]).
    pub fn scrub(&self, text: &str) -> String {
        self.scrubber.scrub_owned(text)
    }

    /// The scrubber of every configured secret.
    pub fn scrubber(&self) -> &Scrubber {
        &self.scrubber
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
            .map(|s| (s.name.clone(), s.written.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::egress::scrub::base64;
    use warren_config::schema::NamedSecret;

    fn broker() -> Broker {
        let mut config = Config::default();
        config.secrets.insert(
            "gh".into(),
            NamedSecret {
                value: warren_config::Secret::new("ghp_s3cr3tTOKENvalue42"),
                hosts: vec!["api.github.com".into(), "http://plain.example:8080".into()],
            },
        );
        Broker::from_config(&config).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn placeholders_are_filled_only_for_the_secrets_hosts() {
        let b = broker();
        assert_eq!(
            b.substitute("token {{secret:gh}}", "api.github.com", 443, true)
                .as_deref(),
            Ok("token ghp_s3cr3tTOKENvalue42")
        );
        let refused = b.substitute("{{secret:gh}}", "evil.example", 443, true);
        assert!(
            refused
                .as_ref()
                .map_err(ToString::to_string)
                .is_err_and(|e| e.contains("api.github.com") && !e.contains("s3cr3t")),
            "{refused:?}"
        );
        assert!(
            b.substitute("{{secret:nope}}", "api.github.com", 443, true)
                .is_err()
        );
        assert_eq!(b.substitute("plain", "x", 1, false).as_deref(), Ok("plain"));
        // Plain HTTP only where an entry names http:// (issue 35 §3).
        let http = b.substitute("{{secret:gh}}", "api.github.com", 80, false);
        assert!(
            http.as_ref()
                .map_err(ToString::to_string)
                .is_err_and(|e| e.contains("https only") && !e.contains("s3cr3t")),
            "{http:?}"
        );
        assert!(
            b.substitute("{{secret:gh}}", "plain.example", 8080, false)
                .is_ok()
        );
        assert!(
            b.substitute("{{secret:gh}}", "plain.example", 8080, true)
                .is_ok()
        );
        // What a request carried, and where a redirect may take it.
        let carried = b.carried(["/x?t={{secret:gh}}", "Bearer {{ secret:gh }}{{secret:x}}"]);
        assert_eq!(carried, vec!["gh".to_string(), "x".to_string()]);
        assert!(b.may_carry(&carried, "api.github.com", 443, true).is_ok());
        let off = b.may_carry(&carried, "evil.example", 443, true);
        assert!(
            off.as_ref()
                .map_err(ToString::to_string)
                .is_err_and(|e| e.contains("carried secret 'gh'")),
            "{off:?}"
        );
        assert!(b.may_carry(&carried, "api.github.com", 80, false).is_err());
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
