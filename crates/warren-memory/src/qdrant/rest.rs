//! The REST side of the Qdrant store: one blocking HTTP client (`ureq`) for the collection,
//! Qdrant's JSON envelope and errors, the collection's creation with its payload indexes, and
//! the outage state: a server that does not answer is retried with backoff, and calls in
//! between fail at once with its last error, so a store is never dropped silently and a turn
//! never waits on a dead server; the first answer ends the outage (no restart).

use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::error::MemoryError;

/// Largest response body accepted.
const MAX_RESPONSE_BYTES: u64 = 64 * 1024 * 1024;
/// First wait after a server stopped answering; doubled per failed attempt up to [`BACKOFF_MAX`].
const BACKOFF_FIRST: Duration = Duration::from_millis(500);
const BACKOFF_MAX: Duration = Duration::from_secs(15);
/// Points per scroll page (export, list scans).
const SCROLL_PAGE: usize = 256;
/// Payload indexes created with the collection: exact fields, the full-text fields and the
/// integer fields that ranges and ordering use.
const INDEXES: [(&str, &str); 9] = [
    ("agent_id", "keyword"),
    ("state", "keyword"),
    ("category", "keyword"),
    ("session", "keyword"),
    ("key", "text"),
    ("content", "text"),
    ("created_at", "integer"),
    ("updated_at", "integer"),
    ("version", "integer"),
];

pub(super) struct Http {
    pub(super) base: String,
    pub(super) collection: String,
    pub(super) api_key: Option<String>,
    pub(super) vector_size: Option<usize>,
    pub(super) agent: ureq::Agent,
    /// The collection exists (set once seen or created, and its embedder checked).
    pub(super) ready: OnceLock<()>,
    /// What makes this process's vectors comparable ([`crate::Embedder::identity`]); `None`
    /// for a store that only counts (the MEM-9 probe).
    pub(super) identity: Option<String>,
    /// Set while the server does not answer.
    pub(super) outage: Mutex<Option<Outage>>,
    /// `data/memory/qdrant.lock`: held across a write's read-check-write (see [`Http::lock_writes`]).
    pub(super) write_lock: Option<std::path::PathBuf>,
}

/// A held Qdrant write lock; dropping it closes the descriptor, which releases the lock.
pub(super) struct WriteGuard {
    _file: Option<std::fs::File>,
}

/// A server that stopped answering: since when, how often, the last error, the next attempt.
pub(super) struct Outage {
    since: Instant,
    failures: u32,
    error: String,
    retry_at: Instant,
}

/// The point that records which embedder made the collection's vectors. It has no
/// `agent_id`, so no read (all filter by agent) ever returns it.
const IDENTITY_POINT: &str = "00000000-0000-4000-8000-00000000e1d0";

impl Http {
    /// Serializes the writes of every process of this install (daemon, CLI) that share the
    /// collection: a write reads the key's versions, checks `expected_version` and upserts the
    /// next one under an exclusive `flock` on `data/memory/qdrant.lock`, so two writers never
    /// both take the same version (compare-and-set holds; no write overwrites another
    /// unseen). Each call opens its own descriptor, so threads of one process exclude each
    /// other too. Installs on other machines sharing the collection are not covered.
    pub(super) fn lock_writes(&self) -> Result<WriteGuard, MemoryError> {
        let Some(path) = &self.write_lock else {
            return Ok(WriteGuard { _file: None });
        };
        let fail = |source: std::io::Error| MemoryError::Io {
            path: path.clone(),
            source,
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(fail)?;
        }
        let file = warren_config::atomic::open_lock_file(path).map_err(fail)?;
        file.lock().map_err(fail)?;
        Ok(WriteGuard { _file: Some(file) })
    }

    pub(super) fn err(&self, message: impl Into<String>) -> MemoryError {
        let mut message = message.into();
        if let Some(key) = &self.api_key {
            message = message.replace(key.as_str(), "[redacted]");
        }
        MemoryError::Qdrant {
            url: crate::error::redact_url(&self.base),
            collection: self.collection.clone(),
            message,
        }
    }

    /// During an outage, before its next attempt is due: the error every call fails with.
    fn unavailable(&self) -> Result<(), MemoryError> {
        let outage = self.outage.lock().unwrap_or_else(|p| p.into_inner());
        match &*outage {
            Some(o) if Instant::now() < o.retry_at => Err(self.err(format!(
                "unavailable for {} s ({} attempts failed; the next in {} ms, no restart needed): {}",
                o.since.elapsed().as_secs(),
                o.failures,
                o.retry_at.saturating_duration_since(Instant::now()).as_millis(),
                o.error
            ))),
            _ => Ok(()),
        }
    }

    /// The server did not answer: the outage begins or its backoff doubles.
    fn failed(&self, error: MemoryError) -> MemoryError {
        let mut outage = self.outage.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let (since, failures) = match &*outage {
            Some(o) => (o.since, o.failures.saturating_add(1)),
            None => {
                tracing::warn!(error = %error, "Qdrant memory store unavailable; memory calls fail until it answers (retried with backoff)");
                (now, 1)
            }
        };
        let wait = BACKOFF_FIRST
            .saturating_mul(1 << (failures - 1).min(16))
            .min(BACKOFF_MAX);
        *outage = Some(Outage {
            since,
            failures,
            error: error.to_string(),
            retry_at: now + wait,
        });
        error
    }

    /// The server answered: an outage ends.
    fn answered(&self) {
        let mut outage = self.outage.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(o) = outage.take() {
            tracing::info!(url = %crate::error::redact_url(&self.base), down_secs = o.since.elapsed().as_secs(), "Qdrant memory store answers again");
        }
    }

    /// The next request is attempted even inside an outage's backoff (the health check).
    pub(super) fn retry_now(&self) {
        let mut outage = self.outage.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(o) = outage.as_mut() {
            o.retry_at = Instant::now();
        }
    }

    /// One request; answers Qdrant's `result`. `Ok(None)` for 404.
    pub(super) fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Option<Value>, MemoryError> {
        self.unavailable()?;
        let url = format!("{}{path}", self.base);
        let response = match (method, body) {
            ("GET", _) => self.with_key(self.agent.get(&url)).call(),
            ("DELETE", _) => self.with_key(self.agent.delete(&url)).call(),
            (m, b) => {
                let body = b.map(Value::to_string).unwrap_or_else(|| "{}".into());
                let req = if m == "PUT" {
                    self.agent.put(&url)
                } else {
                    self.agent.post(&url)
                };
                self.with_key(req)
                    .header("Content-Type", "application/json")
                    .send(body.as_bytes())
            }
        }
        .map_err(|e| self.failed(self.err(format!("{method} {path}: {e}"))))?;
        let status = response.status().as_u16();
        let bytes = response
            .into_body()
            .with_config()
            .limit(MAX_RESPONSE_BYTES)
            .read_to_vec()
            .map_err(|e| {
                self.failed(self.err(format!("{method} {path}: reading the response: {e}")))
            })?;
        self.answered();
        if status == 404 {
            return Ok(None);
        }
        if status == 401 || status == 403 {
            return Err(self.err(format!(
                "{method} {path}: HTTP {status}: the server refused the API key (set memory.qdrant.api_key)"
            )));
        }
        if !(200..300).contains(&status) {
            let detail = serde_json::from_slice::<Value>(&bytes)
                .ok()
                .and_then(|v| v["status"]["error"].as_str().map(String::from))
                .unwrap_or_else(|| String::from_utf8_lossy(&bytes).chars().take(300).collect());
            return Err(self.err(format!("{method} {path}: HTTP {status}: {detail}")));
        }
        if path == "/healthz" {
            return Ok(Some(Value::Null));
        }
        let value: Value = serde_json::from_slice(&bytes)
            .map_err(|e| self.err(format!("{method} {path}: response is not JSON: {e}")))?;
        Ok(Some(value["result"].clone()))
    }

    pub(super) fn with_key<B>(&self, req: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
        match &self.api_key {
            Some(k) => req.header("api-key", k),
            None => req,
        }
    }

    pub(super) fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, MemoryError> {
        self.request(method, path, body.as_ref())?
            .ok_or_else(|| self.err(format!("{method} {path}: HTTP 404")))
    }

    pub(super) fn points(&self, op: &str, body: Value) -> Result<Value, MemoryError> {
        let path = format!("/collections/{}/points{op}", self.collection);
        let method = if op.is_empty() { "PUT" } else { "POST" };
        let wait = if matches!(op, "" | "/delete" | "/payload") {
            "?wait=true"
        } else {
            ""
        };
        self.call(method, &format!("{path}{wait}"), Some(body))
    }

    /// Whether the collection exists; with `create_size`, creates it (and its payload
    /// indexes) when missing.
    pub(super) fn ensure(&self, create_size: Option<usize>) -> Result<bool, MemoryError> {
        if self.ready.get().is_some() {
            return Ok(true);
        }
        let path = format!("/collections/{}", self.collection);
        if let Some(info) = self.request("GET", &path, None)? {
            let size = info["config"]["params"]["vectors"]["size"].as_u64();
            let want = self.vector_size.or(create_size);
            if let (Some(have), Some(want)) = (size, want)
                && have != want as u64
            {
                return Err(self.err(format!(
                    "the collection holds {have}-dimension vectors but the embedder makes {want} \
                     (use another memory.qdrant.collection, or the embedder the collection was made with)"
                )));
            }
            self.check_identity(size.and_then(|s| usize::try_from(s).ok()).or(want))?;
            let _ = self.ready.set(());
            return Ok(true);
        }
        let Some(size) = self.vector_size.or(create_size) else {
            return Ok(false);
        };
        let created = self.request(
            "PUT",
            &path,
            Some(&json!({ "vectors": { "size": size, "distance": "Cosine" } })),
        );
        if let Err(e) = created {
            // Another process may have created it in the meantime.
            if self.request("GET", &path, None)?.is_none() {
                return Err(e);
            }
        }
        for (field, schema) in INDEXES {
            self.call(
                "PUT",
                &format!("{path}/index?wait=true"),
                Some(json!({ "field_name": field, "field_schema": schema })),
            )?;
        }
        self.check_identity(Some(size))?;
        let _ = self.ready.set(());
        Ok(true)
    }

    /// Vectors of two embedding models cannot be compared: the collection records the
    /// embedder that made its vectors (adopting this one when none is recorded), and every
    /// call fails with a clear error while another one is configured.
    fn check_identity(&self, size: Option<usize>) -> Result<(), MemoryError> {
        let Some(identity) = &self.identity else {
            return Ok(());
        };
        let found = self.points(
            "/scroll",
            json!({ "filter": { "must": [ { "has_id": [IDENTITY_POINT] } ] }, "limit": 1, "with_payload": true }),
        )?;
        match found["points"][0]["payload"]["warren_embedder"].as_str() {
            Some(old) if old == identity => Ok(()),
            Some(old) => Err(self.err(format!(
                "the collection's vectors were made by the embedder {old:?}, but memory.embedder \
                 now makes {identity:?}, and vectors of two models cannot be compared (use another \
                 memory.qdrant.collection, or the embedder the collection was made with)"
            ))),
            None => {
                let Some(size) = size.filter(|s| *s > 0) else {
                    return Ok(());
                };
                let mut unit = vec![0.0_f32; size];
                unit[0] = 1.0;
                self.points(
                    "",
                    json!({ "points": [ { "id": IDENTITY_POINT, "vector": unit, "payload": { "warren_embedder": identity } } ] }),
                )?;
                Ok(())
            }
        }
    }

    /// Every point matching `filter` (payload only), in scroll order.
    pub(super) fn scroll_all(&self, filter: Value) -> Result<Vec<Value>, MemoryError> {
        let mut out = Vec::new();
        let mut offset = Value::Null;
        loop {
            let mut body = json!({ "filter": filter, "limit": SCROLL_PAGE, "with_payload": true });
            if !offset.is_null() {
                body["offset"] = offset;
            }
            let page = self.points("/scroll", body)?;
            if let Some(points) = page["points"].as_array() {
                out.extend(points.iter().cloned());
            }
            offset = page["next_page_offset"].clone();
            if offset.is_null() {
                return Ok(out);
            }
        }
    }

    pub(super) fn count(&self, filter: Value) -> Result<u64, MemoryError> {
        Ok(
            self.points("/count", json!({ "filter": filter, "exact": true }))?["count"]
                .as_u64()
                .unwrap_or(0),
        )
    }
}
