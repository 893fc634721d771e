//! The shell's egress proxy (issue 24 §3): an HTTP proxy the daemon runs for one agent, on a
//! listener that lives in the sandbox's own network namespace (the sandbox opens it there and
//! hands it over: `warren_security::sandbox::egress`). It understands `CONNECT host:port`
//! (HTTPS and any TLS client honouring `HTTPS_PROXY`) and absolute-form plain HTTP requests
//! (`GET http://host/path`, `HTTP_PROXY`); the destination is checked against the agent's
//! allowlist and address rule exactly as `http_request` is, then connected from the host. In a
//! CONNECT tunnel the TLS server name (SNI) of the client's first bytes is checked too before
//! anything is forwarded (`sni`: no domain fronting to a site off the list by SNI).
//! Every connection, allowed or refused, is an `egress` trace event with `via = "proxy"`.
//! Secrets are never substituted here: the broker serves `http_request` only.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use warren_security::sandbox::ExitWatch;

use super::AgentEgress;
use super::error::ProxyRefusal;

mod sni;

/// The longest request head the proxy reads.
const MAX_HEAD: usize = 16 * 1024;
/// How long a client may take to send its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// The runtime's [`warren_security::sandbox::EgressProxy`] for one agent.
#[derive(Debug)]
pub struct ShellProxy {
    egress: AgentEgress,
    /// Set when a connection is let through; taken by [`ShellProxy::take_used`].
    used: Arc<AtomicBool>,
    runtime: tokio::runtime::Handle,
}

impl ShellProxy {
    /// The proxy of `egress`'s agent, serving on the current tokio runtime.
    pub fn new(mut egress: AgentEgress) -> Arc<Self> {
        egress.via = "proxy";
        Arc::new(Self {
            egress,
            used: Arc::default(),
            runtime: tokio::runtime::Handle::current(),
        })
    }
}

impl warren_security::sandbox::EgressProxy for ShellProxy {
    fn serve(&self, listener: std::net::TcpListener, exited: ExitWatch) {
        let (egress, used) = (self.egress.clone(), Arc::clone(&self.used));
        self.runtime.spawn(async move {
            if let Err(e) = serve(listener, exited, egress, used).await {
                tracing::warn!("the egress proxy stopped: {e}");
            }
        });
    }

    fn take_used(&self) -> bool {
        self.used.swap(false, Ordering::AcqRel)
    }
}

async fn serve(
    listener: std::net::TcpListener,
    exited: ExitWatch,
    egress: AgentEgress,
    used: Arc<AtomicBool>,
) -> std::io::Result<()> {
    listener.set_nonblocking(true)?;
    let listener = TcpListener::from_std(listener)?;
    let mut exited = tokio::task::spawn_blocking(move || exited.wait());
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            _ = &mut exited => break,
            accepted = listener.accept() => {
                if let Ok((client, _)) = accepted {
                    connections.spawn(handle(client, egress.clone(), Arc::clone(&used)));
                }
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    // The child is gone: so is every connection it made.
    connections.abort_all();
    Ok(())
}

/// A parsed request head.
#[derive(Debug, Default, PartialEq, Eq)]
struct Head {
    method: String,
    host: String,
    port: u16,
    /// What goes to the host: empty for CONNECT; for plain HTTP the head in origin form, with
    /// `Connection: close` (so a kept-alive client cannot send its next request, to another
    /// host, down this connection) and no proxy or hop-by-hop headers.
    forwarded: Vec<u8>,
    /// The `Host` header of a plain HTTP request.
    host_header: Option<String>,
    /// The port a `Host` header without one names: the request's scheme's (80 or 443).
    default_port: u16,
    /// The length of a plain HTTP request's body (its `Content-Length`; 0 without one).
    body_len: u64,
}

/// Headers the proxy does not pass on (hop-by-hop, or meant for the proxy).
const DROPPED: [&str; 4] = [
    "connection",
    "proxy-connection",
    "keep-alive",
    "proxy-authorization",
];

/// The destination of a request head and what to forward.
fn parse_head(head: &[u8]) -> Result<Head, ProxyRefusal> {
    let text = std::str::from_utf8(head).map_err(|_| ProxyRefusal::HeadNotUtf8)?;
    let mut lines = text.split("\r\n");
    let line = lines.next().unwrap_or_default();
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(ProxyRefusal::RequestLine { line: line.into() });
    };
    if method.eq_ignore_ascii_case("CONNECT") {
        let (host, port) = target
            .rsplit_once(':')
            .and_then(|(h, p)| Some((h, p.parse::<u16>().ok()?)))
            .ok_or_else(|| ProxyRefusal::ConnectTarget {
                target: target.into(),
            })?;
        return Ok(Head {
            method: "CONNECT".into(),
            host: host.to_string(),
            port,
            ..Head::default()
        });
    }
    let (uri, host, port) = super::http::target(target)?;
    let default_port = if uri.scheme_str() == Some("https") {
        443
    } else {
        80
    };
    let rest = target.split_once("://").map_or("", |(_, r)| r);
    let path = rest.find('/').map_or("/", |i| &rest[i..]);
    let mut forwarded = format!("{method} {path} {version}\r\n");
    let (mut host_header, mut body_len) = (None, None);
    for header in lines.take_while(|l| !l.is_empty()) {
        let name = header.split(':').next().unwrap_or_default().trim();
        let value = header.get(name.len() + 1..).unwrap_or_default().trim();
        if name.eq_ignore_ascii_case("host") {
            if host_header.is_some() {
                return Err(ProxyRefusal::TwoHosts);
            }
            host_header = Some(value.to_string());
        } else if name.eq_ignore_ascii_case("content-length") {
            let len = value
                .parse::<u64>()
                .map_err(|_| ProxyRefusal::ContentLength {
                    value: value.into(),
                })?;
            if body_len.is_some_and(|l| l != len) {
                return Err(ProxyRefusal::ConflictingLengths);
            }
            body_len = Some(len);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            // The proxy relays exactly one request per connection, so it must know where the
            // body ends.
            return Err(ProxyRefusal::TransferEncoding);
        }
        if !DROPPED.iter().any(|d| name.eq_ignore_ascii_case(d)) {
            forwarded.push_str(header);
            forwarded.push_str("\r\n");
        }
    }
    forwarded.push_str("Connection: close\r\n\r\n");
    Ok(Head {
        method: method.to_string(),
        host,
        port,
        forwarded: forwarded.into_bytes(),
        host_header,
        default_port,
        body_len: body_len.unwrap_or(0),
    })
}

async fn handle(mut client: TcpStream, egress: AgentEgress, used: Arc<AtomicBool>) {
    let mut buf = Vec::with_capacity(1024);
    let head_end = tokio::time::timeout(HEAD_TIMEOUT, async {
        let mut chunk = [0u8; 2048];
        loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                return Some(i + 4);
            }
            if buf.len() > MAX_HEAD {
                return None;
            }
            match client.read(&mut chunk).await {
                Ok(0) | Err(_) => return None,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
    })
    .await;
    let Ok(Some(end)) = head_end else {
        return;
    };
    let Head {
        method,
        host,
        port,
        forwarded,
        host_header,
        default_port,
        body_len,
    } = match parse_head(&buf[..end]) {
        Ok(parsed) => parsed,
        Err(e) => {
            refuse(&mut client, "400 Bad Request", &e.to_string()).await;
            return;
        }
    };
    // Plain HTTP: the Host header must name a host AND port the agent may reach (no fronting
    // by Host, issue 35 §9: a reverse proxy on an allowed port may route by the Host's port).
    if let Some(named) = &host_header {
        let (named_host, named_port) = match named.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(':') => match p.parse::<u16>() {
                Ok(p) => (h, p),
                Err(_) => (named.as_str(), default_port),
            },
            _ => (named.as_str(), default_port),
        };
        if let Err(e) = host_header_allowed(&egress, &host, port, named, named_host, named_port) {
            let e = e.to_string();
            egress.log(&host, port, &method, None, Some(&e));
            refuse(&mut client, "403 Forbidden", &e).await;
            return;
        }
    }
    let check = {
        let (egress, host) = (egress.clone(), host.clone());
        tokio::task::spawn_blocking(move || egress.checked(&host, port).map_err(ProxyRefusal::from))
            .await
            .unwrap_or_else(|e| Err(ProxyRefusal::Stopped(e)))
    };
    let addrs: Vec<SocketAddr> = match check {
        Ok(a) => a,
        Err(e) => {
            let e = e.to_string();
            egress.log(&host, port, &method, None, Some(&e));
            refuse(&mut client, "403 Forbidden", &e).await;
            return;
        }
    };
    let mut upstream = None;
    for a in &addrs {
        if let Ok(Ok(s)) =
            tokio::time::timeout(Duration::from_secs(10), TcpStream::connect(a)).await
        {
            upstream = Some(s);
            break;
        }
    }
    let Some(mut upstream) = upstream else {
        let e = format!("cannot connect to {host}:{port}");
        egress.log(&host, port, &method, None, Some(&e));
        refuse(&mut client, "502 Bad Gateway", &e).await;
        return;
    };
    let mut first = buf.split_off(end);
    if method == "CONNECT" {
        if client
            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            .await
            .is_err()
        {
            return;
        }
        // Nothing is forwarded before the TLS server name, if any, passed (see `sni`).
        let names = sni::first_names(&mut client, &upstream, &mut first).await;
        if let Err(e) =
            names.and_then(|names| names_allowed(&egress, "TLS server name", &host, port, &names))
        {
            egress.log(&host, port, &method, None, Some(&e.to_string()));
            let _ = client.write_all(&sni::UNRECOGNIZED_NAME_ALERT).await;
            let _ = client.shutdown().await;
            return;
        }
    } else if upstream.write_all(&forwarded).await.is_err() {
        return;
    }
    egress.log(&host, port, &method, Some(200), None);
    used.store(true, Ordering::Release);
    if method != "CONNECT" {
        relay_one_request(&mut client, &mut upstream, &first, body_len).await;
        return;
    }
    if !first.is_empty() && upstream.write_all(&first).await.is_err() {
        return;
    }
    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
}

/// Plain HTTP after the head went out: the request's body (`body_len` bytes, the first ones in
/// `first`) to the host and its answer back, and nothing more from the client. A kept-alive
/// client (curl reuses a proxy connection for ANY next URL) would otherwise send its next
/// request, naming another host, down this connection to this host; the proxy closes the
/// connection instead, and the client sends that request afresh, where it is checked.
async fn relay_one_request(
    client: &mut TcpStream,
    upstream: &mut TcpStream,
    first: &[u8],
    body_len: u64,
) {
    let (mut from_client, mut to_client) = client.split();
    let (mut from_host, mut to_host) = upstream.split();
    let send = async {
        let now = usize::try_from(body_len)
            .unwrap_or(usize::MAX)
            .min(first.len());
        to_host.write_all(&first[..now]).await?;
        let rest = body_len.saturating_sub(now as u64);
        tokio::io::copy(&mut (&mut from_client).take(rest), &mut to_host).await?;
        if first.len() > now {
            return Ok(()); // the next request came with this one
        }
        // Anything more is a next request. A client that only closed its side still waits
        // for the answer.
        let mut byte = [0u8; 1];
        match from_client.read(&mut byte).await? {
            0 => std::future::pending().await,
            _ => Ok::<(), std::io::Error>(()),
        }
    };
    tokio::select! {
        _ = send => {}
        _ = tokio::io::copy(&mut from_host, &mut to_client) => {}
    }
}

/// Whether the names a client gave inside its request to `host:port` (its TLS server names in
/// a tunnel: `what`; the `Host` header has [`host_header_allowed`]) may be reached: each is `host` itself or
/// on the allowlist at that port, else the request would front another site. The error names
/// the name and the allowlist.
fn names_allowed(
    egress: &AgentEgress,
    what: &'static str,
    host: &str,
    port: u16,
    names: &[impl AsRef<str>],
) -> Result<(), ProxyRefusal> {
    let host = super::allow::normalize_host(host);
    for name in names {
        let name = super::allow::normalize_host(name.as_ref());
        if name != host && !egress.allow.allows(&name, port) {
            return Err(ProxyRefusal::NameNotAllowed {
                what,
                name,
                host,
                port,
                alias: egress.alias.clone(),
                list: egress.allow.describe(),
            });
        }
    }
    Ok(())
}

/// Whether the `Host` header `named` (`named_host:named_port`) of a plain request to
/// `host:port` may be reached: the same host and port, or on the allowlist at its own port.
fn host_header_allowed(
    egress: &AgentEgress,
    host: &str,
    port: u16,
    named: &str,
    named_host: &str,
    named_port: u16,
) -> Result<(), ProxyRefusal> {
    let host = super::allow::normalize_host(host);
    let name = super::allow::normalize_host(named_host);
    if (name == host && named_port == port) || egress.allow.allows(&name, named_port) {
        return Ok(());
    }
    Err(ProxyRefusal::HostHeader {
        named: named.into(),
        host,
        port,
        name,
        named_port,
        alias: egress.alias.clone(),
        list: egress.allow.describe(),
    })
}

async fn refuse(client: &mut TcpStream, status: &str, why: &str) {
    let body = format!("warren egress proxy: {why}\n");
    let reply = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = client.write_all(reply.as_bytes()).await;
    let _ = client.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_and_absolute_heads_name_their_destination() {
        let c = parse_head(b"CONNECT api.github.com:443 HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(
            c.ok()
                .map(|h| (h.method, h.host, h.port, h.forwarded.is_empty())),
            Some(("CONNECT".into(), "api.github.com".into(), 443, true))
        );
        let g = parse_head(
            b"GET http://127.0.0.1:8080/a?b HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nProxy-Connection: Keep-Alive\r\nConnection: keep-alive\r\nAccept: */*\r\n\r\n",
        )
        .unwrap_or_default();
        assert_eq!(
            (g.method.as_str(), g.host.as_str(), g.port),
            ("GET", "127.0.0.1", 8080)
        );
        assert_eq!(g.host_header.as_deref(), Some("127.0.0.1:8080"));
        assert_eq!(
            String::from_utf8_lossy(&g.forwarded),
            "GET /a?b HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
        assert!(parse_head(b"GET /relative HTTP/1.1\r\n\r\n").is_err());
        assert!(
            parse_head(
                b"GET http://a.example/ HTTP/1.1\r\nHost: a.example\r\nhost: b.example\r\n\r\n"
            )
            .is_err()
        );
    }
}
