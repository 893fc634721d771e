//! Per-agent network egress (issue 24, SPEC PERM-2, CFG-6, SBX-2): the daemon owns the secrets
//! and every connection an agent makes leaves through here.
//!
//! - [`allow`]: the `[agents.<alias>.network] allow` list and the address rule (no SSRF by DNS).
//! - [`broker`]: `{{secret:NAME}}` placeholders filled only for the secret's hosts (over
//!   `https` unless an entry names `http://`), and a request that carried one redirected only
//!   where every secret it carried may go (issue 35 §3).
//! - [`scrub`]: the scrubber of replies, errors and every tool result (issue 35 §5): secrets
//!   and their derived, case-swapped, escaped, spaced, reversed and edge forms.
//! - `http`: the `http_request` tool's client (runs in the daemon, not the sandbox).
//! - [`proxy`]: the shell's HTTP CONNECT proxy, served on a listener that lives in the
//!   sandbox's own network namespace (see `proxy` for the design).
//!
//! Every connection, allowed or refused, is an `egress` trace event (`via`, `host`, `port`,
//! `method`, `status` or `refused`); `warren security egress ALIAS` reads them back.

pub mod allow;
pub mod broker;
pub mod error;
mod http;
pub mod proxy;
pub mod scrub;

use std::sync::Arc;

use serde_json::json;
use warren_config::Config;
use warren_core::AgentAlias;
use warren_security::SecurityPolicy;
use warren_tools::{BoxFuture, EgressRefused, HttpCall, HttpEgress, HttpReply};

pub use allow::{Allowlist, BadHostEntry, Refused};
pub use broker::Broker;
pub use error::{BadUrl, EgressConfigError, ProxyRefusal, RequestError, SecretRefused};

use crate::trace::Trace;

/// One agent's egress: its allowlist, the install's broker, its response cap, the trace.
#[derive(Clone)]
pub struct AgentEgress {
    alias: AgentAlias,
    allow: Arc<Allowlist>,
    broker: Arc<Broker>,
    max_response_bytes: u64,
    trace: Arc<Trace>,
    via: &'static str,
    /// `allow_network = true` (MCP `url` servers only): any host, without the allowlist.
    open: bool,
}

impl std::fmt::Debug for AgentEgress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentEgress")
            .field("alias", &self.alias)
            .field("allow", &self.allow)
            .finish_non_exhaustive()
    }
}

impl AgentEgress {
    /// The egress of the agent `policy` belongs to. A bad allowlist or `[secrets.*]` hosts
    /// entry is an error naming it.
    pub fn new(
        config: &Config,
        policy: &SecurityPolicy,
        trace: Arc<Trace>,
    ) -> Result<Self, EgressConfigError> {
        let alias = policy.alias().clone();
        let allow =
            Allowlist::parse(&policy.egress().allow).map_err(|cause| EgressConfigError::Allow {
                alias: alias.clone(),
                cause,
            })?;
        Ok(Self {
            alias,
            allow: Arc::new(allow),
            broker: Arc::new(Broker::from_config(config)?),
            max_response_bytes: policy.egress().max_response_bytes,
            trace,
            via: "http_request",
            open: false,
        })
    }

    /// The egress of the agent's MCP `url` servers (issue 23): the same client and checks as
    /// `http_request` (allowlist, address rule, cap, scrubbing), logged as `via: "mcp"`; under
    /// `allow_network = true` any host is reached without the allowlist.
    pub fn for_mcp(
        config: &Config,
        policy: &SecurityPolicy,
        trace: Arc<Trace>,
    ) -> Result<Self, EgressConfigError> {
        let mut egress = Self::new(config, policy, trace)?;
        egress.via = "mcp";
        egress.open = policy.allow_network();
        Ok(egress)
    }

    /// The addresses to connect to for `host:port` (see [`Allowlist::resolve`]). Blocking.
    fn resolve(&self, host: &str, port: u16) -> Result<Vec<std::net::SocketAddr>, Refused> {
        if !self.open {
            return self.checked(host, port);
        }
        use std::net::ToSocketAddrs;
        let name = allow::normalize_host(host);
        (name.as_str(), port)
            .to_socket_addrs()
            .map(Iterator::collect)
            .map_err(|e| Refused::Resolve {
                host: name,
                reason: e.to_string(),
            })
    }

    pub fn allowlist(&self) -> &Allowlist {
        &self.allow
    }

    pub fn broker(&self) -> &Broker {
        &self.broker
    }

    /// `host:port` through the allowlist and the address rule (blocking); a refusal counts as a
    /// sandbox denial of layer `network` (`warren_sandbox_denials_total`), a name that does not
    /// resolve as none.
    fn checked(&self, host: &str, port: u16) -> Result<Vec<std::net::SocketAddr>, Refused> {
        self.allow
            .resolve(self.alias.as_str(), host, port)
            .inspect_err(|refused| {
                if !matches!(refused, Refused::Resolve { .. }) {
                    crate::metrics::denial(self.alias.as_str(), "network");
                }
            })
    }

    /// One `egress` trace event.
    fn log(&self, host: &str, port: u16, method: &str, status: Option<u16>, refused: Option<&str>) {
        self.trace.emit_with("egress", &self.alias, None, || {
            let mut data = json!({"via": self.via, "host": host, "port": port, "method": method});
            if let Some(s) = status {
                data["status"] = json!(s);
            }
            if let Some(r) = refused {
                data["refused"] = json!(self.broker.scrub(r));
            }
            data
        });
    }
}

/// The trait's error carries text (`warren_tools::EgressRefused`): a [`RequestError`], scrubbed.
impl HttpEgress for AgentEgress {
    fn send(&self, call: HttpCall) -> BoxFuture<'_, Result<HttpReply, EgressRefused>> {
        let me = self.clone();
        Box::pin(async move {
            let result = tokio::task::spawn_blocking(move || {
                let r = http::send(&me, &call);
                (me, r)
            })
            .await;
            let (me, result) = match result {
                Ok(pair) => pair,
                Err(e) => return Err(EgressRefused(RequestError::Stopped(e).to_string())),
            };
            // Nothing leaves the daemon unscrubbed: the model, session, memory and trace see
            // only what passes here.
            match result {
                Ok(mut reply) => {
                    reply.url = me.broker.scrub(&reply.url);
                    reply.body = me.broker.scrub(&reply.body);
                    for (_, v) in &mut reply.headers {
                        *v = me.broker.scrub(v);
                    }
                    Ok(reply)
                }
                Err(e) => Err(EgressRefused(me.broker.scrub(&e.to_string()))),
            }
        })
    }
}

/// The recent `egress` events of `alias` in `trace` (newest last, at most `limit`).
pub fn recent_connections(
    trace: &std::path::Path,
    alias: &str,
    limit: usize,
) -> Vec<crate::trace::TraceEvent> {
    let mut events: Vec<_> = crate::trace::read_trace(trace)
        .into_iter()
        .filter(|e| e.kind == "egress" && e.agent == alias)
        .collect();
    let skip = events.len().saturating_sub(limit);
    events.drain(..skip);
    events
}

/// `warren security egress ALIAS`: the agent's allowlist, the brokered secrets it may use at
/// each host it can reach, and its recent connections (from the trace, newest last).
pub fn audit(
    config: &Config,
    root: &warren_config::InstallRoot,
    alias: &AgentAlias,
    recent: usize,
) -> Result<serde_json::Value, EgressConfigError> {
    let policy = SecurityPolicy::for_agent(config, root, alias)?;
    let allow =
        Allowlist::parse(&policy.egress().allow).map_err(|cause| EgressConfigError::Allow {
            alias: alias.clone(),
            cause,
        })?;
    let broker = Broker::from_config(config)?;
    let mut per_host: Vec<serde_json::Value> = Vec::new();
    for (name, hosts) in broker.hosts() {
        for written in hosts {
            // `http://host` opts into plain HTTP; the pattern is what follows.
            let host = warren_config::schema::secret_host_scheme(&written)
                .0
                .to_string();
            // A secret's host pattern is usable when the agent may reach it: the same entry
            // is listed, or the named host (at its port, or 443/80) is allowed.
            let (h, port) = match host.rsplit_once(':') {
                Some((h, p)) if p.parse::<u16>().is_ok() => (h.to_string(), p.parse().ok()),
                _ => (host.clone(), None),
            };
            let reachable = allow.entries().contains(&host)
                || (!h.starts_with("*.")
                    && match port {
                        Some(p) => allow.allows(&h, p),
                        None => allow.allows(&h, 443) || allow.allows(&h, 80),
                    });
            if reachable {
                per_host.push(json!({"host": written, "secret": name}));
            }
        }
    }
    let connections: Vec<serde_json::Value> =
        recent_connections(&root.runtime_trace(), alias.as_str(), recent)
            .into_iter()
            .map(|e| {
                let mut d = e.data;
                d["time"] = json!(e.time);
                d
            })
            .collect();
    Ok(json!({
        "agent": alias,
        "allow": allow.entries(),
        "allow_network": policy.allow_network(),
        "taint": policy.taint(),
        "max_response_bytes": policy.egress().max_response_bytes,
        "secrets": per_host,
        "recent": connections,
    }))
}
