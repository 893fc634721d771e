//! The network allowlist (issue 24 §1): `[agents.<alias>.network] allow` entries and the
//! address rule behind them.
//!
//! An entry is an exact host (`api.github.com`), a wildcard subdomain (`*.example.org`: any
//! name below `example.org`, not `example.org` itself) or an IP literal (`127.0.0.1`, `[::1]`),
//! each optionally with `:port` (without one, any port). A host that is an IP literal is
//! allowed only by an IP entry. Names are resolved by the daemon and EVERY resolved address is
//! checked: a private, loopback, link-local, shared, multicast, unspecified or cloud metadata
//! address refuses the request unless that address is itself listed — so a listed name cannot
//! be pointed at the loopback or the metadata service by DNS (no SSRF through a record). The
//! connection then goes to exactly the checked addresses (no second lookup).

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};

pub use warren_config::schema::normalize_host;
use warren_config::schema::{
    HostEntry as Entry, HostEntryError, HostPattern as Host, parse_host_entry,
};

/// A parsed allowlist.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allowlist {
    entries: Vec<Entry>,
    raw: Vec<String>,
}

/// Why a destination is refused. The message names the allowlist (or the address) and the
/// key to change.
/// An allowlist or `hosts` entry that is not a host pattern: the entry as written and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{raw}' is not a host pattern: {cause}")]
pub struct BadHostEntry {
    pub raw: String,
    pub cause: HostEntryError,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error(
        "{host}:{port} is not on the network allowlist of agent '{agent}' ([agents.{agent}.network] allow = [{list}])"
    )]
    NotListed {
        agent: String,
        host: String,
        port: u16,
        list: String,
    },
    #[error(
        "{host} resolves to {addr}, a private, loopback, link-local or metadata address; it is reached only when listed itself in [agents.{agent}.network] allow"
    )]
    PrivateAddress {
        agent: String,
        host: String,
        addr: IpAddr,
    },
    #[error("{host} could not be resolved: {reason}")]
    Resolve { host: String, reason: String },
}

impl Allowlist {
    /// Parses `patterns`; a bad entry is an error naming it.
    pub fn parse(patterns: &[String]) -> Result<Self, BadHostEntry> {
        let mut entries = Vec::with_capacity(patterns.len());
        for raw in patterns {
            entries.push(parse_host_entry(raw).map_err(|cause| BadHostEntry {
                raw: raw.clone(),
                cause,
            })?);
        }
        Ok(Self {
            entries,
            raw: patterns.to_vec(),
        })
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entries as written, comma-separated and quoted (for messages).
    pub fn describe(&self) -> String {
        self.raw
            .iter()
            .map(|r| format!("\"{r}\""))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The entries as written.
    pub fn entries(&self) -> &[String] {
        &self.raw
    }

    /// Whether `host:port` matches an entry (an IP literal only an IP entry).
    pub fn allows(&self, host: &str, port: u16) -> bool {
        let host = normalize_host(host);
        let ip = host.parse::<IpAddr>().ok();
        self.entries.iter().any(|e| {
            e.port.is_none_or(|p| p == port)
                && match (&e.host, ip) {
                    (Host::Ip(listed), Some(ip)) => *listed == ip,
                    (_, Some(_)) | (Host::Ip(_), None) => false,
                    (Host::Exact(name), None) => *name == host,
                    (Host::Below(suffix), None) => host
                        .strip_suffix(suffix.as_str())
                        .is_some_and(|rest| !rest.is_empty()),
                }
        })
    }

    /// Whether the address `ip` (port `port`) is listed itself.
    fn lists_ip(&self, ip: IpAddr, port: u16) -> bool {
        self.entries
            .iter()
            .any(|e| e.host == Host::Ip(ip) && e.port.is_none_or(|p| p == port))
    }

    /// The addresses to connect to for `host:port`, for agent `agent`: refused when the host is
    /// not listed, or when any address it resolves to is a private one that is not listed
    /// itself. Blocking (DNS): call off the async workers.
    pub fn resolve(&self, agent: &str, host: &str, port: u16) -> Result<Vec<SocketAddr>, Refused> {
        let name = normalize_host(host);
        if !self.allows(&name, port) {
            return Err(Refused::NotListed {
                agent: agent.to_string(),
                host: name,
                port,
                list: self.describe(),
            });
        }
        if let Ok(ip) = name.parse::<IpAddr>() {
            return Ok(vec![SocketAddr::new(ip, port)]); // listed by an IP entry
        }
        let addrs: Vec<SocketAddr> = (name.as_str(), port)
            .to_socket_addrs()
            .map_err(|e| Refused::Resolve {
                host: name.clone(),
                reason: e.to_string(),
            })?
            .collect();
        if addrs.is_empty() {
            return Err(Refused::Resolve {
                host: name,
                reason: "no address".into(),
            });
        }
        for a in &addrs {
            if is_internal(a.ip()) && !self.lists_ip(a.ip(), port) {
                return Err(Refused::PrivateAddress {
                    agent: agent.to_string(),
                    host: name,
                    addr: a.ip(),
                });
            }
        }
        Ok(addrs)
    }
}

/// Addresses a name must not lead to unless listed: loopback, private (RFC 1918, ULA),
/// link-local (incl. the 169.254.169.254 metadata service), CGNAT shared space, unspecified,
/// multicast, broadcast, documentation/benchmark ranges, and IPv4-mapped forms of them.
pub fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_multicast()
                || v4.is_broadcast()
                || v4.is_documentation()
                || o[0] == 0
                || (o[0] == 100 && (64..128).contains(&o[1]))
                || (o[0] == 198 && (o[1] == 18 || o[1] == 19))
                || o[0] >= 240
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_internal(IpAddr::V4(v4));
            }
            let s = v6.segments();
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (s[0] & 0xfe00) == 0xfc00 // unique local
                || (s[0] & 0xffc0) == 0xfe80 // link-local
                || (s[0] == 0x64 && s[1] == 0xff9b) // NAT64 (embeds v4)
                || s[0] == 0x2002 // 6to4 (embeds v4)
                || (s[0] == 0x2001 && s[1] == 0xdb8)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(entries: &[&str]) -> Allowlist {
        Allowlist::parse(&entries.iter().map(|s| s.to_string()).collect::<Vec<_>>())
            .unwrap_or_default()
    }

    #[test]
    fn exact_wildcard_and_port_entries_match_as_documented() {
        let l = list(&[
            "api.github.com",
            "*.example.org",
            "127.0.0.1:8080",
            "[::1]:9",
        ]);
        assert!(l.allows("api.github.com", 443));
        assert!(l.allows("API.GitHub.com.", 80));
        assert!(!l.allows("github.com", 443));
        assert!(!l.allows("evilapi.github.com", 443));
        assert!(l.allows("a.example.org", 443));
        assert!(l.allows("a.b.example.org", 443));
        assert!(
            !l.allows("example.org", 443),
            "the apex is not below itself"
        );
        assert!(!l.allows("badexample.org", 443));
        assert!(l.allows("127.0.0.1", 8080));
        assert!(!l.allows("127.0.0.1", 8081));
        assert!(l.allows("[::1]", 9));
        assert!(!l.allows("localhost", 8080), "a name is not its address");
    }

    #[test]
    fn ip_literals_need_an_ip_entry() {
        let l = list(&["*.example.org", "example.org"]);
        assert!(!l.allows("93.184.216.34", 443));
        assert!(!l.allows("169.254.169.254", 80));
    }

    #[test]
    fn bad_entries_are_named() {
        let e = Allowlist::parse(&["http://x.org/".to_string()]).err();
        assert!(e.is_some_and(|e| e.to_string().contains("http://x.org/")));
        assert!(Allowlist::parse(&["x.org:99999".to_string()]).is_err());
        assert!(Allowlist::parse(&["*.".to_string()]).is_err());
    }

    #[test]
    fn a_listed_name_resolving_to_loopback_is_refused_ssrf() {
        // `localhost` resolves to the loopback: listed by name, it is still refused; listed
        // with its address too, it is allowed.
        let l = list(&["localhost:8080"]);
        let r = l.resolve("a", "localhost", 8080);
        assert!(matches!(r, Err(Refused::PrivateAddress { .. })), "{r:?}");
        let l = list(&["localhost:8080", "127.0.0.1:8080", "::1"]);
        assert!(l.resolve("a", "localhost", 8080).is_ok());
    }

    #[test]
    fn internal_ranges() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
        ] {
            assert!(
                is_internal(ip.parse().unwrap_or(IpAddr::from([0, 0, 0, 0]))),
                "{ip}"
            );
        }
        for ip in ["93.184.216.34", "2606:4700::1111", "1.1.1.1"] {
            assert!(
                !is_internal(ip.parse().unwrap_or(IpAddr::from([0, 0, 0, 0]))),
                "{ip}"
            );
        }
    }
}
