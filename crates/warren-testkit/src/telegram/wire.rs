//! The HTTP side of the fake Bot API: reading one request (query string, JSON, form and
//! multipart bodies, `Content-Length` or chunked), writing one JSON answer with
//! `Connection: close`, and POSTing an update to a webhook (plain `http://` only).

use std::collections::BTreeMap;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::{Map, Value};

/// One parsed request.
pub(super) struct Request {
    pub path: String,
    /// Query string and body parameters merged (the body wins): JSON values as sent, form,
    /// query and multipart text fields as strings.
    pub params: Map<String, Value>,
    /// Multipart file fields: field name -> (file name, bytes).
    pub files: BTreeMap<String, (String, Vec<u8>)>,
}

/// The largest body the fake reads (Telegram's upload limit for bots is 50 MB).
const MAX_BODY: usize = 60 << 20;

/// Reads one request from `stream`; `Ok(None)` when the peer closed before sending one.
pub(super) fn read_request(stream: &TcpStream) -> io::Result<Option<Request>> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Ok(None);
    }
    let target = line.split_whitespace().nth(1).unwrap_or("/").to_string();
    let mut length = 0usize;
    let mut chunked = false;
    let mut content_type = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 {
            break;
        }
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            let (k, v) = (k.trim(), v.trim());
            if k.eq_ignore_ascii_case("content-length") {
                length = v.parse().unwrap_or(0);
            } else if k.eq_ignore_ascii_case("transfer-encoding") {
                chunked = v.to_ascii_lowercase().contains("chunked");
            } else if k.eq_ignore_ascii_case("content-type") {
                content_type = v.to_string();
            }
        }
    }
    let body = if chunked {
        read_chunked(&mut reader)?
    } else {
        let mut body = vec![0; length.min(MAX_BODY)];
        reader.read_exact(&mut body)?;
        body
    };
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    let mut params = Map::new();
    for (k, v) in form_pairs(query) {
        params.insert(k, Value::String(v));
    }
    let mut files = BTreeMap::new();
    let mime = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    match mime.as_str() {
        "application/json" => {
            if let Ok(Value::Object(m)) = serde_json::from_slice::<Value>(&body) {
                params.extend(m);
            }
        }
        "multipart/form-data" => {
            if let Some(boundary) = content_type.split(';').find_map(|p| {
                let (k, v) = p.trim().split_once('=')?;
                k.eq_ignore_ascii_case("boundary")
                    .then(|| v.trim_matches('"').to_string())
            }) {
                for part in multipart(&body, &boundary) {
                    match part.filename {
                        Some(name) => {
                            files.insert(part.name, (name, part.bytes));
                        }
                        None => {
                            let text = String::from_utf8_lossy(&part.bytes).into_owned();
                            params.insert(part.name, Value::String(text));
                        }
                    }
                }
            }
        }
        _ => {
            for (k, v) in form_pairs(&String::from_utf8_lossy(&body)) {
                params.insert(k, Value::String(v));
            }
        }
    }
    Ok(Some(Request {
        path: percent_decode(path),
        params,
        files,
    }))
}

fn read_chunked(reader: &mut impl BufRead) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut line = String::new();
    loop {
        line.clear();
        reader.read_line(&mut line)?;
        let size = line.trim().split(';').next().unwrap_or("0");
        let n = usize::from_str_radix(size, 16).unwrap_or(0);
        if n == 0 || out.len() + n > MAX_BODY {
            // The trailer: lines up to an empty one.
            loop {
                line.clear();
                if reader.read_line(&mut line)? == 0 || line.trim().is_empty() {
                    break;
                }
            }
            return Ok(out);
        }
        let start = out.len();
        out.resize(start + n, 0);
        reader.read_exact(&mut out[start..])?;
        line.clear();
        reader.read_line(&mut line)?;
    }
}

/// `a=1&b=x%20y` as decoded pairs (`+` is a space).
pub(super) fn form_pairs(text: &str) -> Vec<(String, String)> {
    text.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (
                percent_decode(&k.replace('+', " ")),
                percent_decode(&v.replace('+', " ")),
            )
        })
        .collect()
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1), bytes.get(i + 2)) {
            (b'%', Some(&h), Some(&l)) if hex(h).is_some() && hex(l).is_some() => {
                out.push((hex(h).unwrap_or(0) * 16 + hex(l).unwrap_or(0)) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

struct Part {
    name: String,
    filename: Option<String>,
    bytes: Vec<u8>,
}

/// The parts of a `multipart/form-data` body (RFC 7578): each part's field name, file name
/// (when it is a file) and bytes.
fn multipart(body: &[u8], boundary: &str) -> Vec<Part> {
    let delimiter = format!("--{boundary}");
    let mut parts = Vec::new();
    let mut rest = match find(body, delimiter.as_bytes()) {
        Some(i) => &body[i + delimiter.len()..],
        None => return parts,
    };
    loop {
        if rest.starts_with(b"--") {
            break;
        }
        let rest_after_crlf = rest.strip_prefix(b"\r\n").unwrap_or(rest);
        let Some(head_end) = find(rest_after_crlf, b"\r\n\r\n") else {
            break;
        };
        let head = String::from_utf8_lossy(&rest_after_crlf[..head_end]).into_owned();
        let content = &rest_after_crlf[head_end + 4..];
        let next = format!("\r\n{delimiter}");
        let Some(end) = find(content, next.as_bytes()) else {
            break;
        };
        let disposition = head
            .lines()
            .find(|l| l.to_ascii_lowercase().starts_with("content-disposition:"))
            .unwrap_or("");
        let attr = |key: &str| {
            disposition.split(';').find_map(|p| {
                let (k, v) = p.trim().split_once('=')?;
                (k.trim() == key).then(|| v.trim().trim_matches('"').to_string())
            })
        };
        if let Some(name) = attr("name") {
            parts.push(Part {
                name,
                filename: attr("filename"),
                bytes: content[..end].to_vec(),
            });
        }
        rest = &content[end + next.len()..];
    }
    parts
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || hay.len() < needle.len() {
        return None;
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Writes one answer and flushes.
pub(super) fn respond(
    stream: &mut TcpStream,
    status: u16,
    content_type: &str,
    body: &[u8],
) -> io::Result<()> {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        409 => "Conflict",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Error",
    };
    write!(
        stream,
        "HTTP/1.1 {status} {reason}\r\nServer: fake-telegram\r\nContent-Type: {content_type}\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )?;
    stream.write_all(body)?;
    stream.flush()
}

/// POSTs `body` (JSON) to the `http://` `url` with the secret-token header when given;
/// returns the status, or why there is none.
pub(super) fn post_webhook(url: &str, secret: Option<&str>, body: &str) -> Result<u16, String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("the fake delivers to http:// URLs only, not {url}"))?;
    let (host, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let addr = if host.contains(':') {
        host.to_string()
    } else {
        format!("{host}:80")
    };
    let mut stream = TcpStream::connect(&addr).map_err(|e| format!("Connection refused: {e}"))?;
    let timeout = Some(Duration::from_secs(10));
    stream
        .set_read_timeout(timeout)
        .and_then(|()| stream.set_write_timeout(timeout))
        .map_err(|e| e.to_string())?;
    let secret = secret.map_or_else(String::new, |s| {
        format!("X-Telegram-Bot-Api-Secret-Token: {s}\r\n")
    });
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n{secret}\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .map_err(|e| e.to_string())?;
    let mut line = String::new();
    BufReader::new(stream)
        .read_line(&mut line)
        .map_err(|e| format!("Read timeout expired: {e}"))?;
    line.split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| "Connection closed without a response".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multipart_fields_and_files_are_parsed() {
        let body = b"--XYZ\r\nContent-Disposition: form-data; name=\"chat_id\"\r\n\r\n42\r\n\
--XYZ\r\nContent-Disposition: form-data; name=\"document\"; filename=\"a b.txt\"\r\n\
Content-Type: text/plain\r\n\r\nline1\r\nline2\r\n--XYZ--\r\n";
        let parts = multipart(body, "XYZ");
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0].name, "chat_id");
        assert_eq!(parts[0].bytes, b"42");
        assert_eq!(parts[1].filename.as_deref(), Some("a b.txt"));
        assert_eq!(parts[1].bytes, b"line1\r\nline2");
    }

    #[test]
    fn form_pairs_decode_percent_and_plus() {
        assert_eq!(
            form_pairs("text=a+b%21&chat_id=-100"),
            vec![
                ("text".to_string(), "a b!".to_string()),
                ("chat_id".to_string(), "-100".to_string())
            ]
        );
    }
}
