//! The OpenAI-compatible embeddings client (MEM-2 hybrid recall): `POST <base>/embeddings` with
//! `{"model", "input": [...]}` and `Authorization: Bearer <key>`, reading `data[].embedding`
//! in `index` order. Works with Ollama, vLLM, llama.cpp and other local servers.
//!
//! Transport: `ureq` (blocking, rustls with ring; the client the providers use), on the blocking
//! pool, so `http://` local servers and `https://` hosted endpoints both work.

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
const MAX_RESPONSE_BYTES: u64 = 64 * 1024 * 1024;

/// Embedder speaking the OpenAI embeddings wire format.
#[derive(Clone)]
pub struct OpenAiEmbedder {
    url: String,
    model: String,
    api_key: Option<String>,
    dimensions: Option<usize>,
    agent: ureq::Agent,
}

impl OpenAiEmbedder {
    /// `base_url` like `http://127.0.0.1:11434/v1` or `https://api.openai.com/v1`
    /// (`/embeddings` is appended unless present; a bare host gets `/v1/embeddings`).
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
        let (scheme, rest) = if let Some(rest) = base_url.strip_prefix("http://") {
            ("http://", rest)
        } else if let Some(rest) = base_url.strip_prefix("https://") {
            ("https://", rest)
        } else {
            return Err(bad(
                "memory.embedder.base_url must start with http:// or https://",
            ));
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => rest.split_at(i),
            None => (rest, ""),
        };
        if authority.contains('@') {
            return Err(bad(
                "put credentials in memory.embedder.api_key, not in the URL",
            ));
        }
        if authority.is_empty() || authority.starts_with(':') {
            return Err(bad("the URL has no host"));
        }
        if let Some((_, port)) = authority.rsplit_once(':')
            && port.parse::<u16>().is_err()
        {
            return Err(bad("the port is not a number"));
        }
        let path = path.trim_end_matches('/');
        let path = if path.ends_with("/embeddings") {
            path.to_string()
        } else if path.is_empty() {
            "/v1/embeddings".to_string()
        } else {
            format!("{path}/embeddings")
        };
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(TIMEOUT))
            .build()
            .into();
        Ok(Self {
            url: format!("{scheme}{authority}{path}"),
            model: model.to_string(),
            api_key,
            dimensions,
            agent,
        })
    }

    fn url(&self) -> String {
        self.url.clone()
    }

    fn err(&self, message: impl Into<String>) -> MemoryError {
        let mut message = message.into();
        if let Some(key) = self.api_key.as_deref().filter(|k| !k.is_empty()) {
            message = message.replace(key, "[redacted]");
        }
        MemoryError::Embedder {
            url: self.url(),
            message,
        }
    }

    /// One blocking request.
    fn post(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, MemoryError> {
        let body = json!({ "model": self.model, "input": texts }).to_string();
        let mut req = self
            .agent
            .post(&self.url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json");
        if let Some(key) = &self.api_key {
            req = req.header("Authorization", &format!("Bearer {key}"));
        }
        let response = req
            .send(body.as_bytes())
            .map_err(|e| self.err(format!("request failed: {e}")))?;
        let status = response.status().as_u16();
        let body = response
            .into_body()
            .with_config()
            .limit(MAX_RESPONSE_BYTES)
            .read_to_vec()
            .map_err(|e| self.err(format!("reading the response: {e}")))?;
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
        let this = self.clone();
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
        assert_eq!(url("http://h/v1/"), "http://h/v1/embeddings");
        assert_eq!(
            url("http://h:1/api/embeddings"),
            "http://h:1/api/embeddings"
        );
        assert_eq!(
            url("https://api.openai.com/v1"),
            "https://api.openai.com/v1/embeddings"
        );
        assert!(url("ftp://h/v1").contains("must start with"));
        assert!(url("http://u:p@h/v1").contains("api_key"));
    }
}
