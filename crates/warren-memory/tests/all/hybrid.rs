//! Hybrid recall with an OpenAI-compatible embedder: a local fake server speaking the real wire
//! format (`POST /v1/embeddings`, `{"model","input"}` → `{"data":[{"index","embedding"}]}`)
//! gives words and their synonyms the same dimensions, so vector hits are recognisable. Runs on
//! SQLite, and on PostgreSQL when WARREN_TEST_POSTGRES_URL is set.

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use common::{Fixture, R, cats, entry, pairs, seen, shared_kinds};
use pretty_assertions::assert_eq;
use warren_config::schema::{EmbedderKind, MemoryBackendKind};

const DIMS: usize = 384;

struct FakeEmbeddings {
    port: u16,
    requests: Arc<AtomicUsize>,
    failing: Arc<AtomicBool>,
}

fn vector(text: &str) -> Vec<f32> {
    let mut v = vec![0.0_f32; DIMS];
    for word in text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        let word = word.to_lowercase();
        let canon = match word.as_str() {
            "automobile" | "vehicle" => "car",
            "feline" => "cat",
            w => w,
        };
        let h = canon.bytes().fold(2166136261_u32, |h, b| {
            (h ^ u32::from(b)).wrapping_mul(16777619)
        });
        v[h as usize % DIMS] += 1.0;
    }
    v
}

impl FakeEmbeddings {
    fn start() -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        let requests = Arc::new(AtomicUsize::new(0));
        let failing = Arc::new(AtomicBool::new(false));
        let (req, fail) = (Arc::clone(&requests), Arc::clone(&failing));
        std::thread::spawn(move || {
            for stream in listener.incoming().map_while(Result::ok) {
                req.fetch_add(1, Ordering::SeqCst);
                let _ = serve(stream, fail.load(Ordering::SeqCst));
            }
        });
        Ok(Self {
            port,
            requests,
            failing,
        })
    }
}

fn serve(stream: std::net::TcpStream, fail: bool) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut length = 0;
    let mut line = String::new();
    reader.read_line(&mut line)?;
    assert!(line.starts_with("POST /v1/embeddings "), "{line}");
    loop {
        line.clear();
        reader.read_line(&mut line)?;
        if line.trim().is_empty() {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    let request: serde_json::Value = serde_json::from_slice(&body)?;
    let mut out = stream;
    if fail {
        let msg = r#"{"error":"model not loaded"}"#;
        return write!(
            out,
            "HTTP/1.1 500 Internal Server Error\r\nContent-Length: {}\r\n\r\n{msg}",
            msg.len()
        );
    }
    let data: Vec<serde_json::Value> = request["input"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
        .map(|(i, t)| serde_json::json!({"object": "embedding", "index": i, "embedding": vector(t.as_str().unwrap_or(""))}))
        .collect();
    let resp =
        serde_json::json!({"object": "list", "data": data, "model": request["model"]}).to_string();
    write!(
        out,
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{resp}",
        resp.len()
    )
}

fn with_embedder(fx: &mut Fixture, fake: &FakeEmbeddings) {
    let e = &mut fx.config.memory.embedder;
    e.kind = EmbedderKind::Openai;
    e.base_url = Some(format!("http://127.0.0.1:{}/v1", fake.port));
    e.model = Some("fake-384".into());
    e.dimensions = Some(DIMS as u32);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hybrid_recall_finds_synonyms_within_the_grants_only_mem2_mem3() -> R {
    for kind in shared_kinds() {
        hybrid_on(kind).await?;
    }
    Ok(())
}

async fn hybrid_on(kind: MemoryBackendKind) -> R {
    let fake = FakeEmbeddings::start()?;
    let mut fx = Fixture::new(
        kind,
        &[
            ("a", vec![cats("b", &["shared"])]),
            ("b", vec![]),
            ("c", vec![]),
        ],
    )?;
    with_embedder(&mut fx, &fake);
    let (a, b, c) = (fx.mem("a").await?, fx.mem("b").await?, fx.mem("c").await?);
    a.store(entry("a", "mine", "my car is red", "core")).await?;
    a.store(entry("a", "pet", "the cat sleeps", "core")).await?;
    b.store(entry("b", "fleet", "company car pool", "shared"))
        .await?;
    b.store(entry("b", "private", "car loan details", "private"))
        .await?;
    c.store(entry("c", "other", "car keys under the mat", "core"))
        .await?;
    assert!(
        fake.requests.load(Ordering::SeqCst) >= 5,
        "one embedding per write"
    );
    // "automobile" appears in no text: only the vectors can find the car rows.
    assert_eq!(
        seen(&*a, "automobile", 10).await?,
        pairs(&[("a", "mine"), ("b", "fleet")]),
        "{kind:?}"
    );
    assert_eq!(seen(&*a, "feline", 10).await?, pairs(&[("a", "pet")]));
    // Both sides agree on the best hit: keyword and vector both match "car" for "car".
    let hits = a
        .recall(warren_memory::RecallQuery::new("red car", 1))
        .await?;
    assert_eq!(hits.first().map(|h| h.entry.key.as_str()), Some("mine"));
    // Vectors are kept per agent and loaded once: a reopened store finds them from the BLOBs.
    let reopened = warren_memory::MemoryStores::new(fx.root.clone());
    let a2 = warren_memory::create_memory_for_agent(
        &reopened,
        &fx.config,
        &warren_core::AgentAlias::new("a")?,
    )
    .await?;
    assert_eq!(
        seen(&*a2, "vehicle", 10).await?,
        pairs(&[("a", "mine"), ("b", "fleet")])
    );
    // A forgotten row leaves the index too.
    assert!(a2.forget("mine".into()).await?);
    assert_eq!(seen(&*a2, "vehicle", 10).await?, pairs(&[("b", "fleet")]));
    // Another embedding model: the old vectors are incomparable and are dropped.
    fx.config.memory.embedder.model = Some("another-model".into());
    let a3 = warren_memory::create_memory_for_agent(
        &reopened,
        &fx.config,
        &warren_core::AgentAlias::new("a")?,
    )
    .await?;
    assert_eq!(seen(&*a3, "vehicle", 10).await?, vec![], "{kind:?}");
    assert_eq!(
        seen(&*a3, "car", 10).await?,
        pairs(&[("b", "fleet")]),
        "{kind:?}"
    );
    Ok(())
}

/// An embedder that fails never loses a write: the row is stored without a vector and recall
/// falls back to keywords.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_embedder_degrades_to_keyword_recall() -> R {
    let fake = FakeEmbeddings::start()?;
    fake.failing.store(true, Ordering::SeqCst);
    let mut fx = Fixture::new(MemoryBackendKind::Sqlite, &[("a", vec![])])?;
    with_embedder(&mut fx, &fake);
    let a = fx.mem("a").await?;
    a.store(entry("a", "mine", "my car is red", "core")).await?;
    assert_eq!(seen(&*a, "car", 5).await?, pairs(&[("a", "mine")]));
    assert_eq!(seen(&*a, "automobile", 5).await?, vec![]);
    Ok(())
}
