//! The OpenAI-compatible embeddings client (MEM-2 hybrid recall): `POST <base>/embeddings` with
//! `{"model", "input": [...]}` and `Authorization: Bearer <key>`, reading `data[].embedding`
//! in `index` order. Works with Ollama, vLLM, llama.cpp and other local servers.
//!
//! Transport: plain HTTP/1.1 over `std::net::TcpStream`, on the blocking pool. Embedding
//! endpoints are usually local (Ollama, vLLM on http://127.0.0.1), and this keeps the
//! workspace free of an HTTP client and a TLS stack (build time on small machines). `https://`
//! URLs are refused with a clear error; a TLS client (e.g. `ureq` with rustls) can slot in
//! behind [`Embedder`] when a remote endpoint is needed.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use warren_config::Config;
use warren_config::schema::EmbedderKind;

use crate::embed::Embedder;
use crate::error::MemoryError;
use crate::store::MemFuture;

const TIMEOUT: Duration = Duration::from_secs(30);
/// Largest response accepted (a batch of vectors as JSON text).
const MAX_RESPONSE_BYTES: usize = 64 * 1024 * 1024;

/// Embedder speaking the OpenAI embeddings wire format over http://.
pub struct OpenAiEmbedder {
    host: String,
    port: u16,
    path: String,
    model: String,
    api_key: Option<String>,
    dimensions: Option<usize>,
}

impl OpenAiEmbedder {
    /// `base_url` like `http://127.0.0.1:11434/v1` (`/embeddings` is appended unless present;
    /// a bare host gets `/v1/embeddings`).
    pub fn new(
        base_url: &str,
        model: &str,
        api_key: Option<String>,
        dimensions: Option<usize>,
    ) -> Result<Self, MemoryError> {
        let bad = |message: &str| MemoryError::Embedder {
            url: base_url.to_string(),
            message: message.to_string(),
        };
        if base_url.starts_with("https://") {
            return Err(bad(
                "https:// endpoints are not supported yet (no TLS client is built in); use an http:// endpoint such as a local Ollama or vLLM server",
            ));
        }
        let rest = base_url
            .strip_prefix("http://")
            .ok_or_else(|| bad("memory.embedder.base_url must start with http://"))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => rest.split_at(i),
            None => (rest, ""),
        };
        if authority.contains('@') {
            return Err(bad(
                "put credentials in memory.embedder.api_key, not in the URL",
            ));
        }
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) => (
                h,
                p.parse::<u16>()
                    .map_err(|_| bad("the port is not a number"))?,
            ),
            None => (authority, 80),
        };
        if host.is_empty() {
            return Err(bad("the URL has no host"));
        }
        let path = path.trim_end_matches('/');
        let path = if path.ends_with("/embeddings") {
            path.to_string()
        } else if path.is_empty() {
            "/v1/embeddings".to_string()
        } else {
            format!("{path}/embeddings")
        };
        Ok(Self {
            host: host.to_string(),
            port,
            path,
            model: model.to_string(),
            api_key,
            dimensions,
        })
    }

    fn url(&self) -> String {
        format!("http://{}:{}{}", self.host, self.port, self.path)
    }

    fn err(&self, message: impl Into<String>) -> MemoryError {
        MemoryError::Embedder {
            url: self.url(),
            message: message.into(),
        }
    }

    /// One blocking request.
    fn post(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, MemoryError> {
        let body = json!({ "model": self.model, "input": texts }).to_string();
        let addr = (self.host.as_str(), self.port)
            .to_socket_addrs()
            .map_err(|e| self.err(format!("cannot resolve host: {e}")))?
            .next()
            .ok_or_else(|| self.err("host resolves to no address"))?;
        let mut stream = TcpStream::connect_timeout(&addr, TIMEOUT)
            .map_err(|e| self.err(format!("cannot connect: {e}")))?;
        stream.set_read_timeout(Some(TIMEOUT)).ok();
        stream.set_write_timeout(Some(TIMEOUT)).ok();
        let auth = self
            .api_key
            .as_deref()
            .map(|k| format!("Authorization: Bearer {k}\r\n"))
            .unwrap_or_default();
        let head = format!(
            "POST {} HTTP/1.1\r\nHost: {}:{}\r\nContent-Type: application/json\r\nAccept: application/json\r\n{auth}Content-Length: {}\r\nConnection: close\r\n\r\n",
            self.path,
            self.host,
            self.port,
            body.len()
        );
        stream
            .write_all(head.as_bytes())
            .and_then(|()| stream.write_all(body.as_bytes()))
            .map_err(|e| self.err(format!("sending the request: {e}")))?;
        let (status, body) = read_response(stream).map_err(|e| self.err(e))?;
        if status != 200 {
            let snippet: String = String::from_utf8_lossy(&body).chars().take(300).collect();
            return Err(self.err(format!("HTTP {status}: {snippet}")));
        }
        let value: Value = serde_json::from_slice(&body)
            .map_err(|e| self.err(format!("response is not JSON: {e}")))?;
        let mut data: Vec<(u64, Vec<f32>)> = value["data"]
            .as_array()
            .ok_or_else(|| self.err("response has no \"data\" array"))?
            .iter()
            .enumerate()
            .map(|(i, item)| {
                let index = item["index"].as_u64().unwrap_or(i as u64);
                let vector = item["embedding"]
                    .as_array()
                    .ok_or_else(|| self.err(format!("data[{i}] has no \"embedding\" array")))?
                    .iter()
                    .map(|x| x.as_f64().map(|f| f as f32))
                    .collect::<Option<Vec<f32>>>()
                    .ok_or_else(|| self.err(format!("data[{i}].embedding holds a non-number")))?;
                Ok((index, vector))
            })
            .collect::<Result<_, MemoryError>>()?;
        data.sort_by_key(|(i, _)| *i);
        if data.len() != texts.len() {
            return Err(self.err(format!(
                "asked for {} vectors, got {}",
                texts.len(),
                data.len()
            )));
        }
        if let Some(want) = self.dimensions
            && let Some((_, v)) = data.iter().find(|(_, v)| v.len() != want)
        {
            return Err(self.err(format!(
                "vector has {} dimensions; memory.embedder.dimensions says {want}",
                v.len()
            )));
        }
        Ok(data.into_iter().map(|(_, v)| v).collect())
    }
}

/// Reads a `Connection: close` HTTP/1.1 response: status and body (Content-Length, chunked,
/// or until EOF).
fn read_response(stream: TcpStream) -> Result<(u16, Vec<u8>), String> {
    let mut reader = BufReader::new(stream.take(MAX_RESPONSE_BYTES as u64));
    let mut line = String::new();
    reader
        .read_line(&mut line)
        .map_err(|e| format!("reading the response: {e}"))?;
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| format!("not an HTTP response: {:?}", line.trim_end()))?;
    let mut length: Option<usize> = None;
    let mut chunked = false;
    loop {
        line.clear();
        reader
            .read_line(&mut line)
            .map_err(|e| format!("reading headers: {e}"))?;
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            let (name, value) = (name.trim().to_ascii_lowercase(), value.trim());
            if name == "content-length" {
                length = value.parse().ok();
            } else if name == "transfer-encoding" && value.eq_ignore_ascii_case("chunked") {
                chunked = true;
            }
        }
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            line.clear();
            reader
                .read_line(&mut line)
                .map_err(|e| format!("reading a chunk size: {e}"))?;
            let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
                .map_err(|_| format!("bad chunk size {:?}", line.trim()))?;
            if size == 0 {
                break;
            }
            let start = body.len();
            body.resize(start + size, 0);
            reader
                .read_exact(&mut body[start..])
                .map_err(|e| format!("reading a chunk: {e}"))?;
            line.clear();
            reader.read_line(&mut line).ok();
        }
    } else if let Some(n) = length {
        body.resize(n, 0);
        reader
            .read_exact(&mut body)
            .map_err(|e| format!("reading the body: {e}"))?;
    } else {
        reader
            .read_to_end(&mut body)
            .map_err(|e| format!("reading the body: {e}"))?;
    }
    Ok((status, body))
}

impl Embedder for OpenAiEmbedder {
    fn describe(&self) -> String {
        format!("{} (model {})", self.url(), self.model)
    }

    fn identity(&self) -> String {
        match self.dimensions {
            Some(d) => format!("openai-compatible:{}:{d}", self.model),
            None => format!("openai-compatible:{}", self.model),
        }
    }

    fn embed(&self, texts: Vec<String>) -> MemFuture<'_, Vec<Vec<f32>>> {
        let this = Self {
            host: self.host.clone(),
            port: self.port,
            path: self.path.clone(),
            model: self.model.clone(),
            api_key: self.api_key.clone(),
            dimensions: self.dimensions,
        };
        Box::pin(async move {
            tokio::task::spawn_blocking(move || this.post(&texts))
                .await
                .map_err(|e| MemoryError::Worker(e.to_string()))?
        })
    }
}

/// The embedder `[memory.embedder]` configures, if any (`kind = "none"`: keyword recall only).
pub fn from_config(config: &Config) -> Result<Option<Arc<dyn Embedder>>, MemoryError> {
    let e = &config.memory.embedder;
    match e.kind {
        EmbedderKind::None => Ok(None),
        EmbedderKind::Openai => {
            let base = e.base_url.as_deref().unwrap_or("https://api.openai.com/v1");
            let model = e.model.as_deref().ok_or_else(|| {
                MemoryError::Config("memory.embedder.model is required for kind \"openai\"".into())
            })?;
            let dims = e.dimensions.and_then(|d| usize::try_from(d).ok());
            let key = e.api_key.as_ref().map(|k| k.expose().to_string());
            Ok(Some(Arc::new(OpenAiEmbedder::new(base, model, key, dims)?)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_rules() {
        let url = |base: &str| {
            OpenAiEmbedder::new(base, "m", None, None)
                .map(|e| e.url())
                .unwrap_or_else(|e| e.to_string())
        };
        assert_eq!(url("http://h:11434"), "http://h:11434/v1/embeddings");
        assert_eq!(url("http://h/v1/"), "http://h:80/v1/embeddings");
        assert_eq!(
            url("http://h:1/api/embeddings"),
            "http://h:1/api/embeddings"
        );
        assert!(url("https://api.openai.com/v1").contains("not supported yet"));
        assert!(url("http://u:p@h/v1").contains("api_key"));
    }
}
