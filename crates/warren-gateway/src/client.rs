//! A minimal blocking HTTP/1.1 client for the CLI's admin calls to the running daemon over
//! loopback: every admin verb through [`DaemonControl`] (the daemon side of the control seam,
//! `crate::control`), and `POST /admin/cron/wake` after `warren runs cancel`. No TLS, no
//! redirects.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use warren_config::InstallRoot;

use crate::auth::ADMIN_KEY_HEADER;
use crate::server::read_endpoint;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("no running gateway found ({path} is missing); start `warren daemon` first")]
    NoGateway { path: String },
    /// The io error's text is in the message and not also `source()` (printed once).
    #[error("cannot reach the gateway at {addr}: {cause}")]
    Io { addr: String, cause: std::io::Error },
    #[error("the gateway at {addr} sent a malformed answer")]
    Malformed { addr: String },
}

/// The published endpoint. A daemon that is starting serves `/health` a moment before it
/// writes `data/gateway.json`, so while one holds the lock this waits up to 3 s for the file.
fn wait_for_endpoint(root: &InstallRoot) -> Option<crate::server::AdminEndpoint> {
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    loop {
        if let Some(endpoint) = read_endpoint(root) {
            return Some(endpoint);
        }
        let running = matches!(
            warren_runtime::probe(root),
            Ok(warren_runtime::DaemonStatus::Running { .. })
        );
        if !running || std::time::Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Calls an admin route of the daemon owning `root`; returns (status, JSON body).
pub fn admin_call(
    root: &InstallRoot,
    method: &str,
    path: &str,
) -> Result<(u16, serde_json::Value), ClientError> {
    admin_call_json(root, method, path, None)
}

/// [`admin_call`] with a JSON request body.
pub fn admin_call_json(
    root: &InstallRoot,
    method: &str,
    path: &str,
    body: Option<&serde_json::Value>,
) -> Result<(u16, serde_json::Value), ClientError> {
    let endpoint = wait_for_endpoint(root).ok_or_else(|| ClientError::NoGateway {
        path: root.gateway_admin().display().to_string(),
    })?;
    let answer = call(&endpoint, method, path, body)?;
    // A daemon that restarted publishes a new admin key: a 401 with another key in
    // data/gateway.json now was the previous daemon's key; retried once (issue 36 §4).
    if answer.0 == 401
        && let Some(fresh) = read_endpoint(root)
        && fresh.admin_key != endpoint.admin_key
    {
        return call(&fresh, method, path, body);
    }
    Ok(answer)
}

/// One admin request to `endpoint`.
fn call(
    endpoint: &crate::server::AdminEndpoint,
    method: &str,
    path: &str,
    body: Option<&serde_json::Value>,
) -> Result<(u16, serde_json::Value), ClientError> {
    let addr = endpoint.addr.to_string();
    let io = |cause| ClientError::Io {
        addr: addr.clone(),
        cause,
    };
    let mut stream =
        TcpStream::connect_timeout(&endpoint.addr, Duration::from_secs(5)).map_err(io)?;
    stream
        .set_read_timeout(Some(Duration::from_secs(600)))
        .map_err(io)?;
    let payload = body.map(ToString::to_string).unwrap_or_default();
    let content_type = if body.is_some() {
        "Content-Type: application/json\r\n"
    } else {
        ""
    };
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{ADMIN_KEY_HEADER}: {}\r\n{content_type}Content-Length: {}\r\nConnection: close\r\n\r\n{payload}",
        endpoint.admin_key,
        payload.len()
    );
    stream.write_all(request.as_bytes()).map_err(io)?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).map_err(io)?;
    let malformed = || ClientError::Malformed { addr: addr.clone() };
    let text = String::from_utf8(raw).map_err(|_| malformed())?;
    let (head, body) = text.split_once("\r\n\r\n").ok_or_else(malformed)?;
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(malformed)?;
    let chunked = head.lines().any(|l| {
        l.to_ascii_lowercase()
            .starts_with("transfer-encoding: chunked")
    });
    let body = if chunked {
        dechunk(body).ok_or_else(malformed)?
    } else {
        body.to_string()
    };
    let json = serde_json::from_str(&body).unwrap_or(serde_json::Value::Null);
    Ok((status, json))
}

fn dechunk(mut body: &str) -> Option<String> {
    let mut out = String::new();
    loop {
        let (size, rest) = body.split_once("\r\n")?;
        let size = usize::from_str_radix(size.trim(), 16).ok()?;
        if size == 0 {
            return Some(out);
        }
        out.push_str(rest.get(..size)?);
        body = rest.get(size + 2..)?;
    }
}

/// Admin verbs run by the daemon owning the root: the typed verb goes as its JSON form to
/// `POST /admin/control`, whose handler deserializes the same enum (issue 34 §3), with the
/// local admin key of `data/gateway.json`.
#[derive(Debug, Clone)]
pub struct DaemonControl {
    root: InstallRoot,
}

/// Why the daemon did not run an admin verb.
#[derive(Debug, thiserror::Error)]
pub enum DaemonControlError {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("cannot encode the request: {0}")]
    Encode(serde_json::Error),
    /// The daemon refused or failed the verb: its status and JSON error body
    /// (`{"error": CODE, "message": TEXT}`).
    #[error("{}", body["message"].as_str().unwrap_or("request failed"))]
    Refused {
        status: u16,
        body: serde_json::Value,
    },
}

impl DaemonControl {
    pub fn new(root: &InstallRoot) -> Self {
        Self { root: root.clone() }
    }
}

impl crate::control::Control for DaemonControl {
    type Error = DaemonControlError;

    fn run(&self, op: &crate::control::AdminOp) -> Result<serde_json::Value, DaemonControlError> {
        let request = serde_json::to_value(op).map_err(DaemonControlError::Encode)?;
        let (status, body) = admin_call_json(&self.root, "POST", "/admin/control", Some(&request))?;
        if (200..300).contains(&status) {
            Ok(body)
        } else {
            Err(DaemonControlError::Refused { status, body })
        }
    }
}
