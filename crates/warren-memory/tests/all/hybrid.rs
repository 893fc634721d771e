//! Hybrid recall with an OpenAI-compatible embedder: the test kit's fake server speaking the
//! real wire format (`POST /v1/embeddings`, `{"model","input"}` →
//! `{"data":[{"index","embedding"}]}`) gives words and their synonyms the same dimensions, so
//! vector hits are recognisable. Runs on SQLite, and on PostgreSQL when
//! WARREN_TEST_POSTGRES_URL is set.

use crate::common;

use common::{Fixture, R, cats, entry, pairs, seen, shared_kinds};
use pretty_assertions::assert_eq;
use warren_config::schema::{EmbedderKind, MemoryBackendKind};
use warren_testkit::qdrant::{FakeEmbeddings, Synonyms};

const DIMS: usize = 384;

/// Words the fake embeds as another: only the vectors link them.
const SYNONYMS: Synonyms = &[("automobile", "car"), ("vehicle", "car"), ("feline", "cat")];

fn with_embedder(fx: &mut Fixture, fake: &FakeEmbeddings) {
    let e = &mut fx.config.memory.embedder;
    e.kind = EmbedderKind::Openai;
    e.base_url = Some(fake.base_url());
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
    let fake = FakeEmbeddings::with_synonyms(DIMS, SYNONYMS)?;
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
    assert!(fake.requests() >= 5, "one embedding per write");
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
    let fake = FakeEmbeddings::with_synonyms(DIMS, SYNONYMS)?;
    fake.set_failing(true);
    let mut fx = Fixture::new(MemoryBackendKind::Sqlite, &[("a", vec![])])?;
    with_embedder(&mut fx, &fake);
    let a = fx.mem("a").await?;
    a.store(entry("a", "mine", "my car is red", "core")).await?;
    assert_eq!(seen(&*a, "car", 5).await?, pairs(&[("a", "mine")]));
    assert_eq!(seen(&*a, "automobile", 5).await?, vec![]);
    Ok(())
}
