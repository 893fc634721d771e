//! Network egress and the credential broker's secrets (issue 24, CFG-6):
//! `[agents.<alias>.network] allow = [...]`, `[secrets.<name>] value hosts`, and the risk
//! profile's `taint` switch.

use serde::{Deserialize, Serialize};

use crate::secrets::Secret;

/// `[agents.<alias>.network]`: the hosts the agent's `http_request` tool and its shell's egress
/// proxy may reach. Each entry is an exact host (`api.github.com`), a wildcard subdomain
/// (`*.example.org`: any subdomain, not the apex) or either with a port (`127.0.0.1:8080`).
/// An IP literal is reachable only when listed; a name resolving to a private, loopback,
/// link-local or metadata address is refused unless that address is listed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentNetworkConfig {
    pub allow: Vec<String>,
}

/// `[secrets.<name>]`: a value the credential broker substitutes for `{{secret:<name>}}` in an
/// `http_request`'s URL or headers, only when the request goes to one of `hosts` (same
/// patterns as the network allowlist) over `https`; an entry written `http://host[:port]` also
/// allows plain `http` to that host (issue 35 §3, [`secret_host_scheme`]). The value is stored
/// encrypted like every secret field.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NamedSecret {
    pub value: Secret,
    pub hosts: Vec<String>,
}

/// The risk profile's `taint`: `on` (the default) asks the operator before every call with
/// side effects once a turn has taken in untrusted content; `off` does not.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaintMode {
    #[default]
    On,
    Off,
}

/// The host part of a network allowlist or `[secrets.<name>] hosts` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostPattern {
    /// An exact name, lower-case, without a trailing dot.
    Exact(String),
    /// `*.domain`: the suffix with its leading dot (`.domain`), matched by names below it.
    Below(String),
    /// An IP literal.
    Ip(std::net::IpAddr),
}

/// One parsed entry: a host pattern and an optional port (none = any port).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostEntry {
    pub host: HostPattern,
    pub port: Option<u16>,
}

/// Lower-case, without a trailing dot or IPv6 brackets.
pub fn normalize_host(host: &str) -> String {
    host.trim_end_matches('.')
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase()
}

/// What an entry may look like (the hint of every refusal).
pub const HOST_ENTRY_FORMS: &str = "write an exact host (\"api.github.com\"), a wildcard \
     subdomain (\"*.example.org\") or an IP literal (\"127.0.0.1\", \"[::1]\"), each with an \
     optional \":port\"";

/// A `[secrets.<name>] hosts` entry split into its host pattern (for [`parse_host_entry`]) and
/// whether it names plain `http://` (issue 35 §3: a brokered secret goes over `https` only,
/// unless its entry says `http://`). `https://` is accepted and means the default; a trailing
/// `/` after either is ignored.
pub fn secret_host_scheme(raw: &str) -> (&str, bool) {
    let raw = raw.trim();
    let strip = |prefix: &str| {
        raw.get(..prefix.len())
            .filter(|p| p.eq_ignore_ascii_case(prefix))
            .map(|_| {
                raw[prefix.len()..]
                    .strip_suffix('/')
                    .unwrap_or(&raw[prefix.len()..])
            })
    };
    match (strip("http://"), strip("https://")) {
        (Some(host), _) => (host, true),
        (None, Some(host)) => (host, false),
        (None, None) => (raw, false),
    }
}

/// Why an allowlist / `hosts` entry is not a host pattern (the caller names the key and the
/// entry; see `validate::host_entry_problem`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostEntryError {
    #[error("the entry is empty")]
    Empty,
    #[error(
        "it has a scheme or a path; write the host only (\"api.github.com\", not \"https://api.github.com/\")"
    )]
    SchemeOrPath,
    #[error("'*' alone would allow every host; list the hosts (a wildcard is \"*.example.org\")")]
    Everything,
    #[error("'*.' needs a domain after it (\"*.example.org\")")]
    BareWildcard,
    #[error("it has a user part ('@'); write the host only")]
    UserPart,
    #[error("the port '{port}' is not a number from 1 to 65535")]
    Port { port: String },
    #[error("'[' opens an IPv6 address that no ']' closes")]
    UnclosedBracket,
    #[error("'[{text}]' is not an IPv6 address")]
    NotIpv6 { text: String },
    #[error("'{after}' after ']' is not ':port'")]
    AfterBracket { after: String },
    #[error("it is not an IPv6 address; write one with a port as \"[2001:db8::1]:443\"")]
    Ipv6WithPort,
    #[error("the host is empty")]
    EmptyHost,
    #[error("'{host}' has an empty label (a leading dot or two dots in a row)")]
    EmptyLabel { host: String },
    #[error("'*' may only be the whole first label (\"*.example.org\")")]
    InnerWildcard,
    #[error(
        "'{host}' has the character {character:?}; a host name has letters, digits, '-' and '_' between dots"
    )]
    Character { host: String, character: char },
}

/// Parses one `[agents.<alias>.network] allow` / `[secrets.<name>] hosts` entry; the error says
/// why it is not one (`config validate` and the daemon's egress share this parser).
pub fn parse_host_entry(raw: &str) -> Result<HostEntry, HostEntryError> {
    use std::net::IpAddr;
    let raw = raw.trim();
    if raw.is_empty() {
        return Err(HostEntryError::Empty);
    }
    if raw.contains("://") || raw.contains('/') {
        return Err(HostEntryError::SchemeOrPath);
    }
    if raw == "*" {
        return Err(HostEntryError::Everything);
    }
    if raw.starts_with("*.")
        && raw
            .trim_start_matches("*.")
            .trim_start_matches('.')
            .is_empty()
    {
        return Err(HostEntryError::BareWildcard);
    }
    if raw.contains('@') {
        return Err(HostEntryError::UserPart);
    }
    let port_of = |p: &str| match p.parse::<u16>() {
        Ok(n) if n > 0 => Ok(Some(n)),
        _ => Err(HostEntryError::Port { port: p.into() }),
    };
    // `[v6]:port`, `[v6]`, bare v6, `host:port`, `host`.
    let (host, port) = if let Some(rest) = raw.strip_prefix('[') {
        let (h, after) = rest
            .split_once(']')
            .ok_or(HostEntryError::UnclosedBracket)?;
        if h.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(HostEntryError::NotIpv6 { text: h.into() });
        }
        let port = match after.strip_prefix(':') {
            Some(p) => port_of(p)?,
            None if after.is_empty() => None,
            None => {
                return Err(HostEntryError::AfterBracket {
                    after: after.into(),
                });
            }
        };
        (h.to_string(), port)
    } else if raw.parse::<IpAddr>().is_ok() {
        (raw.to_string(), None)
    } else {
        match raw.rsplit_once(':') {
            Some((h, _)) if h.contains(':') => {
                return Err(HostEntryError::Ipv6WithPort);
            }
            Some((h, p)) => (h.to_string(), port_of(p)?),
            None => (raw.to_string(), None),
        }
    };
    let host = normalize_host(&host);
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(HostEntry {
            host: HostPattern::Ip(ip),
            port,
        });
    }
    let check = |name: &str| -> Result<(), HostEntryError> {
        if name.is_empty() {
            return Err(HostEntryError::EmptyHost);
        }
        for label in name.split('.') {
            if label.is_empty() {
                return Err(HostEntryError::EmptyLabel { host: name.into() });
            }
            if label.contains('*') {
                return Err(HostEntryError::InnerWildcard);
            }
            if let Some(c) = label
                .chars()
                .find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_'))
            {
                return Err(HostEntryError::Character {
                    host: name.into(),
                    character: c,
                });
            }
        }
        Ok(())
    };
    let host = match host.strip_prefix("*.") {
        Some("") => return Err(HostEntryError::BareWildcard),
        Some(suffix) => {
            check(suffix)?;
            HostPattern::Below(format!(".{suffix}"))
        }
        None => {
            check(&host)?;
            HostPattern::Exact(host)
        }
    };
    Ok(HostEntry { host, port })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_parse_and_bad_ones_say_why() {
        let ok = |s: &str| parse_host_entry(s).map_err(|e| format!("{s}: {e}"));
        assert_eq!(
            ok("API.github.com."),
            Ok(HostEntry {
                host: HostPattern::Exact("api.github.com".into()),
                port: None
            })
        );
        assert_eq!(
            ok("*.example.org:8443"),
            Ok(HostEntry {
                host: HostPattern::Below(".example.org".into()),
                port: Some(8443)
            })
        );
        assert!(matches!(
            ok("[::1]:80"),
            Ok(HostEntry {
                host: HostPattern::Ip(_),
                port: Some(80)
            })
        ));
        assert!(matches!(ok("::1"), Ok(HostEntry { port: None, .. })));
        assert!(matches!(
            ok("127.0.0.1:8080"),
            Ok(HostEntry {
                port: Some(8080),
                ..
            })
        ));
        assert_eq!(
            secret_host_scheme("http://127.0.0.1:8080"),
            ("127.0.0.1:8080", true)
        );
        assert_eq!(secret_host_scheme("HTTP://a.org/"), ("a.org", true));
        assert_eq!(secret_host_scheme("https://a.org"), ("a.org", false));
        assert_eq!(secret_host_scheme("a.org"), ("a.org", false));
        for (bad, why) in [
            ("", "empty"),
            ("https://x.org/", "scheme or a path"),
            ("user@x.org", "user part"),
            ("x.org:99999", "'99999' is not a number from 1 to 65535"),
            ("x.org:0", "from 1 to 65535"),
            ("*.", "needs a domain"),
            ("*", "every host"),
            ("api.*.org", "whole first label"),
            ("*example.org", "whole first label"),
            ("a..org", "empty label"),
            ("exa mple.org", "' '"),
            ("[::1", "no ']' closes"),
            ("[x]:1", "not an IPv6 address"),
            ("fe80::1::2:80", "IPv6"),
        ] {
            let e = parse_host_entry(bad)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(e.contains(why), "{bad:?}: {e}");
        }
    }
}
