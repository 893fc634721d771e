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
/// patterns as the network allowlist). The value is stored encrypted like every secret field.
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
