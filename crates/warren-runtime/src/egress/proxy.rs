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

/// The destination of a request head: `(method, host, port, head to forward)`; the head is
/// rewritten to origin form for plain HTTP and empty for CONNECT.
fn parse_head(head: &[u8]) -> Result<(String, String, u16, Vec<u8>), String> {
    let text = std::str::from_utf8(head).map_err(|_| "the request head is not UTF-8")?;
    let line = text.lines().next().unwrap_or_default();
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(format!("not an HTTP request line: '{line}'"));
    };
    if method.eq_ignore_ascii_case("CONNECT") {
        let (host, port) = target
            .rsplit_once(':')
            .and_then(|(h, p)| Some((h, p.parse::<u16>().ok()?)))
            .ok_or_else(|| format!("CONNECT needs host:port, not '{target}'"))?;
        return Ok(("CONNECT".into(), host.to_string(), port, Vec::new()));
    }
    let (_, host, port) = super::http::target(target)?;
    let rest = target.split_once("://").map_or("", |(_, r)| r);
    let path = rest.find('/').map_or("/", |i| &rest[i..]);
    let mut forwarded = format!("{method} {path} {version}").into_bytes();
    forwarded.extend_from_slice(&head[line.len()..]);
    Ok((method.to_string(), host, port, forwarded))
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
    let (method, host, port, forwarded) = match parse_head(&buf[..end]) {
        Ok(parsed) => parsed,
        Err(e) => {
            refuse(&mut client, "400 Bad Request", &e).await;
            return;
        }
    };
    let check = {
        let (egress, host) = (egress.clone(), host.clone());
        tokio::task::spawn_blocking(move || {
            egress
                .allow
                .resolve(egress.alias.as_str(), &host, port)
                .inspect_err(|e| egress.count_refusal(e))
                .map_err(|e| e.to_string())
        })
        .await
        .unwrap_or_else(|e| Err(e.to_string()))
    };
    let addrs: Vec<SocketAddr> = match check {
        Ok(a) => a,
        Err(e) => {
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
        if let Err(e) = names.and_then(|names| server_names_allowed(&egress, &host, port, &names)) {
            egress.log(&host, port, &method, None, Some(&e));
            let _ = client.write_all(&sni::UNRECOGNIZED_NAME_ALERT).await;
            let _ = client.shutdown().await;
            return;
        }
    } else if upstream.write_all(&forwarded).await.is_err() {
        return;
    }
    egress.log(&host, port, &method, Some(200), None);
    used.store(true, Ordering::Release);
    if !first.is_empty() && upstream.write_all(&first).await.is_err() {
        return;
    }
    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
}

/// Whether the TLS server names a client asked for in its tunnel to `host:port` may be
/// reached: each is the CONNECT host itself or on the allowlist at that port (else the tunnel
/// would front another site; the error names the name and the allowlist).
fn server_names_allowed(
    egress: &AgentEgress,
    host: &str,
    port: u16,
    names: &[String],
) -> Result<(), String> {
    let host = super::allow::normalize_host(host);
    for name in names {
        let name = super::allow::normalize_host(name);
        if name != host && !egress.allow.allows(&name, port) {
            return Err(format!(
                "the TLS server name '{name}' in the tunnel to {host}:{port} is not the CONNECT host and is not on the network allowlist of agent '{alias}' ([agents.{alias}.network] allow = [{list}])",
                alias = egress.alias,
                list = egress.allow.describe()
            ));
        }
    }
    Ok(())
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
            c.map(|(m, h, p, f)| (m, h, p, f.is_empty())),
            Ok(("CONNECT".into(), "api.github.com".into(), 443, true))
        );
        let g =
            parse_head(b"GET http://127.0.0.1:8080/a?b HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n");
        let (m, h, p, f) = g.unwrap_or_default();
        assert_eq!((m.as_str(), h.as_str(), p), ("GET", "127.0.0.1", 8080));
        assert!(
            f.starts_with(b"GET /a?b HTTP/1.1\r\nHost: 127.0.0.1:8080"),
            "{}",
            String::from_utf8_lossy(&f)
        );
        assert!(parse_head(b"GET /relative HTTP/1.1\r\n\r\n").is_err());
    }
}
