//! The TLS server name check of the shell's egress proxy (issue 24 §3: the allowlist is
//! enforced by hostname, CONNECT host AND SNI).
//!
//! The proxy resolves and connects the CONNECT host itself, so the TLS server name (SNI) a
//! client sends inside the tunnel cannot move the TCP destination. It can still pick another
//! site behind the same front: `CONNECT allowed.example:443`, then a ClientHello for
//! `evil.example` to a CDN serving both (domain fronting by SNI). So the first bytes a client
//! sends through a tunnel are read before anything is forwarded: when they are a TLS
//! ClientHello, every `host_name` it carries must be the CONNECT host or itself on the
//! agent's allowlist at that port, or the tunnel is closed with a TLS `unrecognized_name`
//! alert and nothing reaches the host. A tunnel whose client speaks something else, or whose
//! server speaks first, is not inspected. What travels encrypted (an HTTP `Host` header inside
//! TLS, Encrypted Client Hello's inner name) cannot be seen: docs/security.md says so.

use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

use super::super::error::ProxyRefusal;

/// The longest ClientHello read (a real one is well under 2 KiB; with post-quantum key shares
/// under 4 KiB).
const MAX_HELLO: usize = 64 * 1024;
/// How long a client that began a TLS handshake may take to finish its ClientHello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// The TLS alert the proxy answers a refused server name with: fatal `unrecognized_name`.
pub(super) const UNRECOGNIZED_NAME_ALERT: [u8; 7] = [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x70];

/// What the first bytes of a tunnel are.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Hello {
    /// Not a TLS handshake record: the tunnel carries something else.
    NotTls,
    /// The start of a TLS handshake, not complete yet.
    Partial,
    /// A complete ClientHello and the `host_name`s of its server_name extension(s).
    Complete(Vec<String>),
    /// A TLS handshake that is not a well-formed ClientHello.
    Malformed(&'static str),
}

/// Reads `bytes`, the start of what a client sent into a tunnel.
pub(super) fn client_hello(bytes: &[u8]) -> Hello {
    match bytes.first() {
        None => return Hello::Partial,
        Some(0x16) => {}
        Some(_) => return Hello::NotTls,
    }
    // A handshake message may span records: reassemble the first one.
    let mut handshake: Vec<u8> = Vec::new();
    let mut rest = bytes;
    loop {
        if handshake.len() >= 4 {
            if handshake[0] != 1 {
                return Hello::Malformed("the first handshake message is not a ClientHello");
            }
            let len = usize::from(handshake[1]) << 16
                | usize::from(handshake[2]) << 8
                | usize::from(handshake[3]);
            if len > MAX_HELLO {
                return Hello::Malformed("the ClientHello is longer than 64 KiB");
            }
            if handshake.len() >= 4 + len {
                return match server_names(&handshake[4..4 + len]) {
                    Some(names) => Hello::Complete(names),
                    None => Hello::Malformed("the ClientHello is malformed"),
                };
            }
        }
        if rest.len() < 5 {
            return Hello::Partial;
        }
        if rest[0] != 0x16 {
            return Hello::Malformed("the ClientHello is interleaved with other TLS records");
        }
        let len = usize::from(u16::from_be_bytes([rest[3], rest[4]]));
        if rest.len() < 5 + len {
            return Hello::Partial;
        }
        handshake.extend_from_slice(&rest[5..5 + len]);
        rest = &rest[5 + len..];
    }
}

/// A cursor over TLS's length-prefixed fields.
struct Fields<'a>(&'a [u8]);

impl<'a> Fields<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Some(head)
    }

    fn u8_len(&mut self) -> Option<&'a [u8]> {
        let n = usize::from(*self.take(1)?.first()?);
        self.take(n)
    }

    fn u16(&mut self) -> Option<u16> {
        let b = self.take(2)?;
        Some(u16::from_be_bytes([b[0], b[1]]))
    }

    fn u16_len(&mut self) -> Option<&'a [u8]> {
        let n = usize::from(self.u16()?);
        self.take(n)
    }
}

/// Every `host_name` of every server_name extension of a ClientHello body (`None`:
/// malformed). More than one is against the protocol but checked all the same: a server
/// might pick any of them.
fn server_names(body: &[u8]) -> Option<Vec<String>> {
    let mut hello = Fields(body);
    hello.take(2 + 32)?; // legacy_version, random
    hello.u8_len()?; // legacy_session_id
    hello.u16_len()?; // cipher_suites
    hello.u8_len()?; // legacy_compression_methods
    let mut names = Vec::new();
    if hello.0.is_empty() {
        return Some(names); // no extensions at all
    }
    let mut extensions = Fields(hello.u16_len()?);
    while !extensions.0.is_empty() {
        let kind = extensions.u16()?;
        let data = extensions.u16_len()?;
        if kind != 0 {
            continue;
        }
        let mut list = Fields(Fields(data).u16_len()?);
        while !list.0.is_empty() {
            let name_type = *list.take(1)?.first()?;
            let name = list.u16_len()?;
            if name_type == 0 {
                names.push(String::from_utf8(name.to_vec()).ok()?);
            }
        }
    }
    Some(names)
}

/// Reads the client's first bytes of a tunnel into `first` (which may hold some already)
/// until they are known not to be TLS or hold a whole ClientHello; the server names it asks
/// for (none when it is not TLS or the server spoke first). An error says why the tunnel is
/// refused.
pub(super) async fn first_names(
    client: &mut TcpStream,
    upstream: &TcpStream,
    first: &mut Vec<u8>,
) -> Result<Vec<String>, ProxyRefusal> {
    let mut chunk = [0u8; 4096];
    loop {
        match client_hello(first) {
            Hello::NotTls => return Ok(Vec::new()),
            Hello::Complete(names) => return Ok(names),
            Hello::Malformed(why) => return Err(ProxyRefusal::Tls(why)),
            Hello::Partial if first.len() > MAX_HELLO => {
                return Err(ProxyRefusal::Tls("the ClientHello is longer than 64 KiB"));
            }
            Hello::Partial => {}
        }
        let read = if first.is_empty() {
            // Nothing sent yet: a client may wait for a server that speaks first (SSH, SMTP);
            // then there is no ClientHello to check.
            tokio::select! {
                r = client.read(&mut chunk) => r,
                _ = upstream.readable() => return Ok(Vec::new()),
            }
        } else {
            match tokio::time::timeout(HELLO_TIMEOUT, client.read(&mut chunk)).await {
                Ok(r) => r,
                Err(_) => return Err(ProxyRefusal::Tls("the ClientHello did not arrive")),
            }
        };
        match read {
            Ok(0) if first.is_empty() => return Ok(Vec::new()),
            Ok(0) => return Err(ProxyRefusal::Tls("the client closed mid-ClientHello")),
            Ok(n) => first.extend_from_slice(&chunk[..n]),
            Err(e) => return Err(ProxyRefusal::Client(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ClientHello with `names` in one server_name extension, split into records of at
    /// most `record` bytes of handshake each.
    fn hello(names: &[&str], record: usize) -> Vec<u8> {
        let mut list = Vec::new();
        for n in names {
            list.push(0u8);
            list.extend_from_slice(&(n.len() as u16).to_be_bytes());
            list.extend_from_slice(n.as_bytes());
        }
        let mut sni = (list.len() as u16).to_be_bytes().to_vec();
        sni.extend_from_slice(&list);
        let mut extensions = Vec::new();
        // An unrelated extension first (supported_versions), then server_name.
        extensions.extend_from_slice(&[0x00, 0x2b, 0x00, 0x03, 0x02, 0x03, 0x04]);
        extensions.extend_from_slice(&0u16.to_be_bytes());
        extensions.extend_from_slice(&(sni.len() as u16).to_be_bytes());
        extensions.extend_from_slice(&sni);
        let mut body = vec![0x03, 0x03];
        body.extend_from_slice(&[7u8; 32]);
        body.push(0); // session id
        body.extend_from_slice(&[0x00, 0x02, 0x13, 0x01]); // one cipher suite
        body.extend_from_slice(&[0x01, 0x00]); // null compression
        body.extend_from_slice(&(extensions.len() as u16).to_be_bytes());
        body.extend_from_slice(&extensions);
        let mut handshake = vec![1u8];
        handshake.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
        handshake.extend_from_slice(&body);
        let mut out = Vec::new();
        for piece in handshake.chunks(record) {
            out.extend_from_slice(&[0x16, 0x03, 0x01]);
            out.extend_from_slice(&(piece.len() as u16).to_be_bytes());
            out.extend_from_slice(piece);
        }
        out
    }

    #[test]
    fn the_server_names_of_a_client_hello_are_read_even_across_records() {
        let one = hello(&["evil.example"], 1 << 14);
        assert_eq!(
            client_hello(&one),
            Hello::Complete(vec!["evil.example".into()])
        );
        let split = hello(&["a.example", "b.example"], 20);
        assert_eq!(
            client_hello(&split),
            Hello::Complete(vec!["a.example".into(), "b.example".into()])
        );
        // Every prefix is incomplete, never a verdict.
        for cut in 1..split.len() {
            assert_eq!(client_hello(&split[..cut]), Hello::Partial, "cut at {cut}");
        }
        assert_eq!(client_hello(&hello(&[], 1 << 14)), Hello::Complete(vec![]));
    }

    #[test]
    fn other_protocols_and_broken_hellos_are_told_apart() {
        assert_eq!(client_hello(b"GET / HTTP/1.1\r\n"), Hello::NotTls);
        assert_eq!(client_hello(b"SSH-2.0-OpenSSH\r\n"), Hello::NotTls);
        assert_eq!(client_hello(b""), Hello::Partial);
        // A server hello (type 2) where a ClientHello belongs.
        let mut server = hello(&["x.example"], 1 << 14);
        server[5] = 2;
        assert!(matches!(client_hello(&server), Hello::Malformed(_)));
        // Truncated inside the extensions, with a record length that claims it is whole.
        let mut cut = hello(&["x.example"], 1 << 14);
        cut.truncate(cut.len() - 3);
        let len = (cut.len() - 5) as u16;
        cut[3..5].copy_from_slice(&len.to_be_bytes());
        let hs_len = (cut.len() - 9) as u32;
        cut[6..9].copy_from_slice(&hs_len.to_be_bytes()[1..]);
        assert!(matches!(client_hello(&cut), Hello::Malformed(_)));
        // An alert record in the middle of the handshake.
        let mut mixed = hello(&["x.example"], 20);
        mixed[25] = 0x15;
        assert!(matches!(client_hello(&mixed), Hello::Malformed(_)));
    }
}
