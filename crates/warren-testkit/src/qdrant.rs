//! The real Qdrant engine for tests (issue 20 §1): no Qdrant server is installable here, so
//! [`QdrantEngine`] runs Qdrant's own engine from the `qdrant-edge-py` package (PyPI) behind a
//! small HTTP front (`qdrant_front.py`) that speaks the subset of Qdrant's REST API Warren
//! calls. Filtering, full-text matching, ordering and scoring are the engine's.
//!
//! A missing `qdrant_edge` module is an error that names the package (`.ci/run` installs it),
//! never a skip.
//!
//! [`FakeEmbeddings`] is a local OpenAI-compatible `/v1/embeddings` server whose vectors are
//! deterministic word hashes, so recall tests know which rows are near a query.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The front's source, written next to the engine's data when it starts.
const FRONT: &str = include_str!("qdrant_front.py");

/// A running engine on 127.0.0.1; killed when dropped.
pub struct QdrantEngine {
    child: Child,
    /// Held open: the front exits when it closes (this process ended, however).
    _stdin: Option<std::process::ChildStdin>,
    port: u16,
    api_key: Option<String>,
    _dir: tempfile::TempDir,
}

impl QdrantEngine {
    /// Starts the engine with an empty data directory; with `api_key`, every request but
    /// `/healthz` must carry it in the `api-key` header (as Qdrant).
    pub fn start(api_key: Option<&str>) -> io::Result<Self> {
        Self::start_on(api_key, 0)
    }

    /// [`Self::start`] on `port` of 127.0.0.1 (0: any free port), e.g. the address a daemon
    /// was configured with while no engine ran.
    pub fn start_on(api_key: Option<&str>, port: u16) -> io::Result<Self> {
        let dir = tempfile::tempdir()?;
        let script = dir.path().join("qdrant_front.py");
        std::fs::write(&script, FRONT)?;
        let mut cmd = Command::new("python3");
        cmd.arg(&script)
            .arg("--data")
            .arg(dir.path().join("data"))
            .arg("--port")
            .arg(port.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .env_remove("FAILPOINTS");
        if let Some(k) = api_key {
            cmd.arg("--api-key").arg(k);
        }
        let mut child = cmd.spawn().map_err(|e| {
            io::Error::other(format!("cannot start python3 for the Qdrant engine: {e}"))
        })?;
        let stdin = child.stdin.take();
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| io::Error::other("no stdout"))?;
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line)?;
        let Some(port) = line
            .trim()
            .strip_prefix("listening on ")
            .and_then(|p| p.parse().ok())
        else {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = e.read_to_string(&mut err);
            }
            let _ = child.kill();
            let _ = child.wait();
            return Err(io::Error::other(format!(
                "the Qdrant engine did not start (install it: python3 -m pip install qdrant-edge-py==0.9.0): {err}"
            )));
        };
        if let Some(mut e) = child.stderr.take() {
            // Drained so a chatty engine never blocks on a full pipe.
            std::thread::spawn(move || io::copy(&mut e, &mut io::sink()));
        }
        Ok(Self {
            child,
            _stdin: stdin,
            port,
            api_key: api_key.map(String::from),
            _dir: dir,
        })
    }

    /// Base URL of the REST API.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn api_key(&self) -> Option<&str> {
        self.api_key.as_deref()
    }

    /// The engine's process id (a test may stop it to see a backend fail).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stops the engine now (requests then fail to connect).
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Data directory of the engine (one sub-directory per collection).
    pub fn data_dir(&self) -> &Path {
        self._dir.path()
    }
}

impl Drop for QdrantEngine {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A local `/v1/embeddings` server speaking the OpenAI wire format with deterministic
/// vectors: each word (lowercased) adds 1 to the dimension its FNV-1a hash picks.
pub struct FakeEmbeddings {
    port: u16,
    requests: Arc<AtomicUsize>,
    failing: Arc<AtomicBool>,
}

/// Words embedded as another word: `(word, as)`.
pub type Synonyms = &'static [(&'static str, &'static str)];

/// The vector [`FakeEmbeddings`] answers for `text`.
pub fn hash_vector(text: &str, dims: usize) -> Vec<f32> {
    vector(text, dims, &[])
}

fn vector(text: &str, dims: usize, synonyms: Synonyms) -> Vec<f32> {
    let mut v = vec![0.0_f32; dims];
    for word in text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        let word = word.to_lowercase();
        let word = synonyms
            .iter()
            .find(|(w, _)| *w == word)
            .map_or(word.as_str(), |(_, canon)| canon);
        let h = word.bytes().fold(2166136261_u32, |h, b| {
            (h ^ u32::from(b)).wrapping_mul(16777619)
        });
        v[h as usize % dims] += 1.0;
    }
    if v.iter().all(|x| *x == 0.0) {
        v[0] = 1.0;
    }
    v
}

impl FakeEmbeddings {
    /// Serves `dims`-dimension vectors until the test process ends.
    pub fn start(dims: usize) -> io::Result<Self> {
        Self::with_synonyms(dims, &[])
    }

    /// [`Self::start`], embedding each word of `synonyms` as the word it stands for: a query
    /// with a synonym finds the rows by vector only.
    pub fn with_synonyms(dims: usize, synonyms: Synonyms) -> io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        let requests = Arc::new(AtomicUsize::new(0));
        let failing = Arc::new(AtomicBool::new(false));
        let server = Server {
            dims,
            synonyms,
            requests: Arc::clone(&requests),
            failing: Arc::clone(&failing),
        };
        std::thread::spawn(move || {
            for stream in listener.incoming().map_while(Result::ok) {
                let server = server.clone();
                std::thread::spawn(move || {
                    let _ = server.serve(stream);
                });
            }
        });
        Ok(Self {
            port,
            requests,
            failing,
        })
    }

    /// The base URL to configure as `[memory.embedder] base_url`.
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    /// Requests received so far.
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    /// While `failing`, every request is answered `500` (`model not loaded`), as an embedder
    /// whose model is gone.
    pub fn set_failing(&self, failing: bool) {
        self.failing.store(failing, Ordering::SeqCst);
    }
}

/// What a connection of [`FakeEmbeddings`] shares with the test.
#[derive(Clone)]
struct Server {
    dims: usize,
    synonyms: Synonyms,
    requests: Arc<AtomicUsize>,
    failing: Arc<AtomicBool>,
}

impl Server {
    /// Answers the requests of one connection (kept alive) until it closes.
    fn serve(&self, stream: std::net::TcpStream) -> io::Result<()> {
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        let mut reader = BufReader::new(stream.try_clone()?);
        let started = Instant::now();
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line)? == 0 || started.elapsed() > Duration::from_secs(60) {
                return Ok(());
            }
            self.requests.fetch_add(1, Ordering::SeqCst);
            let mut length = 0usize;
            loop {
                let mut h = String::new();
                reader.read_line(&mut h)?;
                if h.trim().is_empty() {
                    break;
                }
                if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body)?;
            let (status, reply) = if !line.starts_with("POST /v1/embeddings ") {
                (
                    "404 Not Found",
                    format!(r#"{{"error":"no route {}"}}"#, line.trim()),
                )
            } else if self.failing.load(Ordering::SeqCst) {
                (
                    "500 Internal Server Error",
                    r#"{"error":"model not loaded"}"#.to_string(),
                )
            } else {
                ("200 OK", self.embeddings(&body))
            };
            let mut out = &stream;
            write!(
                out,
                "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{reply}",
                reply.len()
            )?;
            out.flush()?;
        }
    }

    /// The answer to an embeddings request `body`: a vector per input, in order.
    fn embeddings(&self, body: &[u8]) -> String {
        let request: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
        let inputs: Vec<&str> = match &request["input"] {
            serde_json::Value::String(s) => vec![s.as_str()],
            serde_json::Value::Array(a) => {
                a.iter().map(|x| x.as_str().unwrap_or_default()).collect()
            }
            _ => Vec::new(),
        };
        let data: Vec<serde_json::Value> = inputs
            .iter()
            .enumerate()
            .map(|(i, t)| {
                serde_json::json!({"object": "embedding", "index": i, "embedding": vector(t, self.dims, self.synonyms)})
            })
            .collect();
        serde_json::json!({"object": "list", "data": data, "model": request["model"]}).to_string()
    }
}
