//! The daemon's HTTP client for `http_request` (issue 24 §1): one hop at a time, each checked
//! against the allowlist and the address rule, connected to exactly the checked addresses
//! (a resolver pinned to them, so DNS cannot answer differently between check and connect),
//! redirects followed only to allowed destinations (at most [`MAX_HOPS`]), the body read up to
//! the policy's cap. Blocking: runs on a blocking thread.
//!
//! A request that carried a `{{secret:NAME}}` (in its URL or a header) follows a redirect only
//! to a destination every such secret may go to, scheme included (issue 35 §3): the server the
//! secret was meant for may echo it into its `Location` (an open redirect), and from there it
//! would ride to any allowlisted host.

use std::io::Read;
use std::net::SocketAddr;
use std::time::Duration;

use ureq::http::{self, Uri};
use ureq::unversioned::resolver::{ArrayVec, ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::{DefaultConnector, NextTimeout};
use warren_tools::{HttpCall, HttpReply};

use super::AgentEgress;
use super::error::{BadUrl, RequestError, SendFailure};

/// Requests per call, the first included (so at most 4 redirects).
pub const MAX_HOPS: usize = 5;
/// Headers never sent on to another origin by a redirect.
const CREDENTIAL_HEADERS: [&str; 3] = ["authorization", "cookie", "proxy-authorization"];
/// The longest a call may take, all hops together.
const TIMEOUT: Duration = Duration::from_secs(30);

/// A resolver that answers the addresses the allowlist check returned, whatever the name.
#[derive(Debug)]
struct Pinned(Vec<SocketAddr>);

impl Resolver for Pinned {
    fn resolve(
        &self,
        _uri: &Uri,
        _config: &ureq::config::Config,
        _timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        let mut out: ResolvedSocketAddrs =
            ArrayVec::from_fn(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
        for a in self.0.iter().take(16) {
            out.push(*a);
        }
        Ok(out)
    }
}

/// `url` with each `{{secret:NAME}}` replaced by `SECRET` (for parsing the template).
fn masked(url: &str) -> String {
    let mut out = String::with_capacity(url.len());
    let mut rest = url;
    while let Some(at) = rest.find("{{secret:") {
        out.push_str(&rest[..at]);
        match rest[at..].find("}}") {
            Some(end) => {
                out.push_str("SECRET");
                rest = &rest[at + end + 2..];
            }
            None => {
                out.push_str(&rest[at..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

/// Whether `uri` is `https` (else plain `http`; [`target`] allows no other scheme).
fn is_https(uri: &Uri) -> bool {
    uri.scheme_str() == Some("https")
}

/// Scheme, host and port of `url` (http or https only; placeholders allowed outside the host).
pub(super) fn target(url: &str) -> Result<(Uri, String, u16), BadUrl> {
    let owned = || url.to_string();
    if url.split("://").nth(1).is_some_and(|r| {
        r.split(['/', '?', '#'])
            .next()
            .is_some_and(|authority| authority.contains('{'))
    }) {
        return Err(BadUrl::PlaceholderHost { url: owned() });
    }
    let parsed = masked(url);
    let uri: Uri = parsed
        .parse()
        .map_err(|e: http::uri::InvalidUri| BadUrl::Invalid {
            url: owned(),
            cause: e.to_string(),
        })?;
    let https = match uri.scheme_str() {
        Some("https") => true,
        Some("http") => false,
        _ => return Err(BadUrl::Scheme { url: owned() }),
    };
    let host = uri
        .host()
        .ok_or_else(|| BadUrl::NoHost { url: owned() })?
        .to_string();
    if host.contains('{') || uri.authority().is_some_and(|a| a.as_str().contains('@')) {
        return Err(BadUrl::HostCredentials { url: owned() });
    }
    let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
    Ok((uri, host, port))
}

/// `location` relative to `base`.
fn join(base: &Uri, location: &str) -> String {
    if location.contains("://") {
        return location.to_string();
    }
    let scheme = base.scheme_str().unwrap_or("http");
    if let Some(rest) = location.strip_prefix("//") {
        return format!("{scheme}://{rest}");
    }
    let authority = base.authority().map(|a| a.as_str()).unwrap_or_default();
    if location.starts_with('/') {
        return format!("{scheme}://{authority}{location}");
    }
    let path = base.path();
    let dir = &path[..path.rfind('/').map_or(0, |i| i + 1)];
    format!("{scheme}://{authority}{dir}{location}")
}

/// Makes `call` for `egress`'s agent. Errors are unscrubbed (the caller scrubs).
pub(super) fn send(egress: &AgentEgress, call: &HttpCall) -> Result<HttpReply, RequestError> {
    let cap = egress.max_response_bytes;
    let mut url = call.url.clone();
    let mut method = call.method.clone();
    let mut body = call.body.clone();
    let mut headers: Vec<(String, String)> = call
        .headers
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let first = {
        let (uri, host, port) = target(&url)?;
        (is_https(&uri), host, port)
    };
    // The secrets this request carries, wherever a redirect takes it.
    let carried = egress.broker.carried(
        std::iter::once(call.url.as_str()).chain(call.headers.values().map(String::as_str)),
    );
    for hop in 0..MAX_HOPS {
        let (uri, host, port) = target(&url)?;
        let https = is_https(&uri);
        if hop > 0
            && let Err(why) = egress.broker.may_carry(&carried, &host, port, https)
        {
            egress.log(&host, port, &method, None, Some(&why.to_string()));
            return Err(RequestError::RedirectSecret { url, cause: why });
        }
        let addrs = match egress.resolve(&host, port) {
            Ok(a) => a,
            Err(refused) => {
                egress.log(&host, port, &method, None, Some(&refused.to_string()));
                return Err(if hop == 0 {
                    RequestError::Refused(refused)
                } else {
                    RequestError::RedirectRefused {
                        url,
                        cause: refused,
                    }
                });
            }
        };
        // Placeholders are filled for this hop's host only; a header that carried one is
        // dropped on a redirect to another origin, and so are credential headers and any
        // header holding a configured secret's value (an MCP `url` server's `headers`, resolved
        // before they get here; issue 35 §3), like a browser's Authorization.
        if hop > 0 && (https, host.as_str(), port) != (first.0, first.1.as_str(), first.2) {
            headers.retain(|(k, v)| {
                !v.contains("{{secret:")
                    && !CREDENTIAL_HEADERS.iter().any(|c| k.eq_ignore_ascii_case(c))
                    && matches!(
                        egress.broker.scrubber().scrub(v),
                        std::borrow::Cow::Borrowed(_)
                    )
            });
        }
        let real_url = egress.broker.substitute(&url, &host, port, https)?;
        match target(&real_url) {
            Ok((_, h, p)) if h == host && p == port => {}
            _ => return Err(BadUrl::PlaceholderChangedHost { url }.into()),
        }
        let mut request = http::Request::builder()
            .method(method.as_str())
            .uri(&real_url);
        for (k, v) in &headers {
            request = request.header(k.as_str(), egress.broker.substitute(v, &host, port, https)?);
        }
        let config = ureq::Agent::config_builder()
            .proxy(None)
            .max_redirects(0)
            .max_redirects_will_error(false)
            .http_status_as_error(false)
            .timeout_global(Some(TIMEOUT))
            .build();
        let agent = ureq::Agent::with_parts(config, DefaultConnector::new(), Pinned(addrs));
        let sent = match &body {
            Some(b) => request
                .body(b.clone())
                .map_err(SendFailure::Build)
                .and_then(|r| agent.run(r).map_err(SendFailure::Run)),
            None => request
                .body(())
                .map_err(SendFailure::Build)
                .and_then(|r| agent.run(r).map_err(SendFailure::Run)),
        };
        let response = match sent {
            Ok(r) => r,
            Err(cause) => {
                egress.log(&host, port, &method, None, Some(&cause.to_string()));
                return Err(RequestError::Send { method, url, cause });
            }
        };
        let status = response.status().as_u16();
        egress.log(&host, port, &method, Some(status), None);
        let location = response
            .headers()
            .get(http::header::LOCATION)
            .and_then(|l| l.to_str().ok())
            .map(str::to_string);
        if let (true, Some(location)) = (response.status().is_redirection(), location) {
            if hop + 1 == MAX_HOPS {
                return Err(RequestError::TooManyRedirects {
                    max: MAX_HOPS - 1,
                    url: call.url.clone(),
                });
            }
            url = join(&uri, &location);
            if status != 307 && status != 308 {
                method = "GET".into();
                body = None;
            }
            continue;
        }
        let reply_headers = response
            .headers()
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect();
        let mut bytes = Vec::new();
        let mut reader = response
            .into_body()
            .into_reader()
            .take(cap.saturating_add(1));
        if let Err(cause) = reader.read_to_end(&mut bytes) {
            return Err(RequestError::Read { url, cause });
        }
        let truncated = bytes.len() as u64 > cap;
        bytes.truncate(usize::try_from(cap).unwrap_or(usize::MAX));
        return Ok(HttpReply {
            url,
            status,
            headers: reply_headers,
            body: String::from_utf8_lossy(&bytes).into_owned(),
            truncated,
        });
    }
    Err(RequestError::TooManyRedirects {
        max: MAX_HOPS - 1,
        url: call.url.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_join_like_a_browser() {
        let base: Uri = "http://a.org:8/x/y?q".parse().unwrap_or_default();
        assert_eq!(join(&base, "https://b.org/z"), "https://b.org/z");
        assert_eq!(join(&base, "//c.org/z"), "http://c.org/z");
        assert_eq!(join(&base, "/z"), "http://a.org:8/z");
        assert_eq!(join(&base, "z"), "http://a.org:8/x/z");
    }

    #[test]
    fn hosts_with_credentials_or_placeholders_are_refused() {
        assert!(target("http://u:p@a.org/").is_err());
        assert!(target("http://{{secret:x}}.a.org/").is_err());
        assert!(target("ftp://a.org/").is_err());
        assert_eq!(target("https://a.org/x").map(|t| t.2), Ok(443));
    }
}
