//! The errors of egress: a bad allowlist or `[secrets.*] hosts` entry (naming its key), a
//! secret placeholder refused (naming the secret, its hosts and the destination, never the
//! value), an `http_request` that failed (naming the URL), and a request the shell's proxy
//! refused (naming the destination and the allowlist). Messages are scrubbed by the caller
//! before they leave the daemon.

use warren_core::AgentAlias;

use super::allow::{BadHostEntry, Refused};

/// An agent's egress cannot be built from the config: the key at fault and the entry.
#[derive(Debug, thiserror::Error)]
pub enum EgressConfigError {
    #[error("[agents.{alias}.network] allow: {cause}")]
    Allow {
        alias: AgentAlias,
        cause: BadHostEntry,
    },
    #[error("[secrets.{name}] hosts: {cause}")]
    SecretHosts { name: String, cause: BadHostEntry },
    /// The agent's policy could not be built (`warren security egress`).
    #[error(transparent)]
    Policy(#[from] warren_security::PolicyError),
}

/// A `{{secret:NAME}}` placeholder (or a redirect of a request that carried one) refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretRefused {
    #[error("an unterminated {{{{secret:...}}}} placeholder")]
    Unterminated,
    #[error("no secret named '{name}' (set [secrets.{name}] value and hosts in config.toml)")]
    Unknown { name: String },
    #[error(
        "secret '{name}' may be sent only to [{hosts}] ([secrets.{name}] hosts), not to {host}:{port}"
    )]
    NotForHost {
        name: String,
        hosts: String,
        host: String,
        port: u16,
    },
    #[error(
        "secret '{name}' goes over https only: write the URL as https://, or list the host as \"http://{host}:{port}\" in [secrets.{name}] hosts to allow plain http"
    )]
    HttpsOnly {
        name: String,
        host: String,
        port: u16,
    },
    #[error(
        "the request carried secret '{name}', which may go only to [{hosts}] ([secrets.{name}] hosts, https unless an entry names http://), not to {scheme}://{host}:{port}"
    )]
    Carried {
        name: String,
        hosts: String,
        scheme: &'static str,
        host: String,
        port: u16,
    },
}

/// A URL `http_request` (or the proxy) will not send to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadUrl {
    #[error("'{url}': the host may not hold a placeholder")]
    PlaceholderHost { url: String },
    #[error("'{url}' is not a valid URL: {cause}")]
    Invalid { url: String, cause: String },
    #[error("'{url}' is not an http:// or https:// URL")]
    Scheme { url: String },
    #[error("'{url}' has no host")]
    NoHost { url: String },
    #[error("'{url}': the host may not hold a placeholder or credentials")]
    HostCredentials { url: String },
    #[error("'{url}': a placeholder may not change the host")]
    PlaceholderChangedHost { url: String },
}

/// Why an `http_request` (or an MCP `url` server's request) failed; unscrubbed.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error(transparent)]
    Url(#[from] BadUrl),
    #[error(transparent)]
    Secret(#[from] SecretRefused),
    #[error(transparent)]
    Refused(#[from] Refused),
    #[error("a redirect to {url} was not followed: {cause}")]
    RedirectSecret { url: String, cause: SecretRefused },
    #[error("a redirect to {url} was not followed: {cause}")]
    RedirectRefused { url: String, cause: Refused },
    #[error("{method} {url} failed: {cause}")]
    Send {
        method: String,
        url: String,
        cause: SendFailure,
    },
    #[error("reading the response of {url} failed: {cause}")]
    Read { url: String, cause: std::io::Error },
    #[error("more than {max} redirects from {url}")]
    TooManyRedirects { max: usize, url: String },
    #[error("the request stopped: {0}")]
    Stopped(tokio::task::JoinError),
}

/// The HTTP client's failure on one hop.
#[derive(Debug, thiserror::Error)]
pub enum SendFailure {
    #[error("{0}")]
    Build(ureq::http::Error),
    #[error("{0}")]
    Run(ureq::Error),
}

/// A request the shell's egress proxy refuses (the reply to the client and the `egress`
/// trace event say this).
#[derive(Debug, thiserror::Error)]
pub enum ProxyRefusal {
    #[error("the request head is not UTF-8")]
    HeadNotUtf8,
    #[error("not an HTTP request line: '{line}'")]
    RequestLine { line: String },
    #[error("CONNECT needs host:port, not '{target}'")]
    ConnectTarget { target: String },
    #[error(transparent)]
    Url(#[from] BadUrl),
    #[error("the request has more than one Host header")]
    TwoHosts,
    #[error("Content-Length '{value}' is not a number")]
    ContentLength { value: String },
    #[error("the request has conflicting Content-Length headers")]
    ConflictingLengths,
    #[error(
        "the egress proxy relays plain-HTTP request bodies with a Content-Length only (not Transfer-Encoding); HTTPS is tunnelled as is"
    )]
    TransferEncoding,
    #[error(
        "the {what} '{name}' of the request to {host}:{port} is neither that host nor on the network allowlist of agent '{alias}' ([agents.{alias}.network] allow = [{list}])"
    )]
    NameNotAllowed {
        what: &'static str,
        name: String,
        host: String,
        port: u16,
        alias: AgentAlias,
        list: String,
    },
    #[error(
        "the Host header '{named}' of the request to {host}:{port} names {name}:{named_port}, which is neither that host and port nor on the network allowlist of agent '{alias}' ([agents.{alias}.network] allow = [{list}])"
    )]
    HostHeader {
        named: String,
        host: String,
        port: u16,
        name: String,
        named_port: u16,
        alias: AgentAlias,
        list: String,
    },
    #[error(transparent)]
    Refused(#[from] Refused),
    #[error("the address check stopped: {0}")]
    Stopped(tokio::task::JoinError),
    #[error("TLS in the tunnel: {0}")]
    Tls(&'static str),
    #[error("the client's connection failed: {0}")]
    Client(std::io::Error),
}
