//! Property test of the grant graph (MEM-2/3/8): random agents, grants (plain and
//! category-limited, including unknown categories), upserts and queries. For every agent and
//! query, recall returns EXACTLY the rows a simple model allows: never a forbidden row, always
//! every own matching row; and with a small limit, a full page of allowed rows (forbidden rows
//! never crowd allowed ones out before the limit). Run on SQLite and Markdown (plain grants,
//! MEM-4), on Qdrant (Qdrant's own engine, see `qdrant`), and on PostgreSQL when
//! WARREN_TEST_POSTGRES_URL is set: each equal to the model, and on the same scenario equal to
//! what SQLite answered.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};

use common::{Fixture, postgres_url};
use proptest::prelude::*;
use warren_config::schema::{MemoryBackendKind, MemoryGrant};
use warren_memory::{NewEntry, RecallQuery};

const AGENTS: [&str; 4] = ["a", "b", "c", "d"];
const WORDS: [&str; 5] = ["red", "blue", "green", "cat", "dog"];
const CATEGORIES: [&str; 4] = ["core", "c1", "c2", "c3"];

#[derive(Debug, Clone)]
struct Scenario {
    agents: usize,
    /// (reader, owner) → None = all categories, Some(list) = those only.
    grants: BTreeMap<(usize, usize), Option<Vec<String>>>,
    /// (agent, key, words, category), applied in order (later writes replace by key).
    writes: Vec<(usize, usize, Vec<usize>, usize)>,
    /// Query words per check: None = recent recall.
    queries: Vec<Option<usize>>,
}

fn scenario(category_grants: bool) -> impl Strategy<Value = Scenario> {
    (2..=AGENTS.len()).prop_flat_map(move |n| {
        let pairs: Vec<(usize, usize)> = (0..n)
            .flat_map(|r| (0..n).filter(move |o| *o != r).map(move |o| (r, o)))
            .collect();
        let grant = if category_grants {
            prop_oneof![
                2 => Just(None::<Option<Vec<String>>>),
                1 => Just(Some(None)),
                2 => proptest::sample::subsequence(vec!["core", "c1", "c2", "c3", "unknown"], 1..=3)
                    .prop_map(|c| Some(Some(c.into_iter().map(String::from).collect()))),
            ]
            .boxed()
        } else {
            prop_oneof![Just(None), Just(Some(None))].boxed()
        };
        let grants = proptest::collection::vec(grant, pairs.len()).prop_map(move |gs| {
            pairs
                .iter()
                .zip(gs)
                .filter_map(|(p, g)| g.map(|g| (*p, g)))
                .collect::<BTreeMap<_, _>>()
        });
        let write = (
            0..n,
            0..5_usize,
            proptest::sample::subsequence((0..WORDS.len()).collect::<Vec<_>>(), 1..=3),
            0..CATEGORIES.len(),
        );
        let query = proptest::option::weighted(0.8, 0..WORDS.len());
        (
            grants,
            proptest::collection::vec(write, 1..25),
            proptest::collection::vec(query, 1..4),
        )
            .prop_map(move |(grants, writes, queries)| Scenario {
                agents: n,
                grants,
                writes,
                queries,
            })
    })
}

/// What each reader must see for `query`: `(owner alias, key)`.
fn expected(s: &Scenario, reader: usize, query: Option<usize>) -> BTreeSet<(String, String)> {
    let mut rows: BTreeMap<(usize, usize), (&Vec<usize>, usize)> = BTreeMap::new();
    for (agent, key, words, cat) in &s.writes {
        rows.insert((*agent, *key), (words, *cat));
    }
    rows.into_iter()
        .filter(|((owner, _), (words, cat))| {
            let allowed = *owner == reader
                || match s.grants.get(&(reader, *owner)) {
                    None => false,
                    Some(None) => true,
                    Some(Some(c)) => c.iter().any(|x| x == CATEGORIES[*cat]),
                };
            allowed && query.is_none_or(|q| words.contains(&q))
        })
        .map(|((owner, key), _)| (AGENTS[owner].to_string(), format!("k{key}")))
        .collect()
}

/// What one backend answered: per reader and query, the full recall and how many rows the
/// top-2 held (which two depends on the backend's ranking).
type Answers = Vec<(BTreeSet<(String, String)>, usize)>;

fn run(kind: MemoryBackendKind, s: &Scenario) -> Result<Answers, TestCaseError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let fail = |e: &dyn std::fmt::Display| TestCaseError::fail(e.to_string());
    rt.block_on(async {
        let agents: Vec<(&str, Vec<MemoryGrant>)> = (0..s.agents)
            .map(|r| {
                let grants = s
                    .grants
                    .iter()
                    .filter(|((reader, _), _)| *reader == r)
                    .map(|((_, owner), g)| match g {
                        None => MemoryGrant::All(
                            AGENTS[*owner].parse().unwrap_or_else(|e| panic!("{e}")),
                        ),
                        Some(c) => MemoryGrant::Categories {
                            agent: AGENTS[*owner].parse().unwrap_or_else(|e| panic!("{e}")),
                            categories: c.clone(),
                        },
                    })
                    .collect();
                (AGENTS[r], grants)
            })
            .collect();
        let fx = Fixture::new(kind, &agents).map_err(|e| fail(&e))?;
        let mut mems = Vec::new();
        for alias in &AGENTS[..s.agents] {
            mems.push(fx.mem(alias).await.map_err(|e| fail(&e))?);
        }
        for (agent, key, words, cat) in &s.writes {
            let content: Vec<&str> = words.iter().map(|w| WORDS[*w]).collect();
            let entry = NewEntry::new(
                AGENTS[*agent],
                &format!("k{key}"),
                &content.join(" "),
                Some(CATEGORIES[*cat]),
                None,
            )
            .map_err(|e| fail(&e))?;
            mems[*agent].store(entry).await.map_err(|e| fail(&e))?;
        }
        let mut answers = Answers::new();
        for reader in 0..s.agents {
            for q in &s.queries {
                let text = q.map_or("*", |w| WORDS[w]);
                let got: BTreeSet<(String, String)> = mems[reader]
                    .recall(RecallQuery::new(text, 200))
                    .await
                    .map_err(|e| fail(&e))?
                    .into_iter()
                    .map(|h| (h.entry.agent.into(), h.entry.key))
                    .collect();
                let want = expected(s, reader, *q);
                prop_assert_eq!(
                    &got,
                    &want,
                    "{:?}: reader {} query {:?}",
                    kind,
                    AGENTS[reader],
                    text
                );
                // A small limit: still only allowed rows, and a full page whenever enough are
                // allowed (forbidden rows never take allowed rows' places before the limit).
                let top: BTreeSet<(String, String)> = mems[reader]
                    .recall(RecallQuery::new(text, 2))
                    .await
                    .map_err(|e| fail(&e))?
                    .into_iter()
                    .map(|h| (h.entry.agent.into(), h.entry.key))
                    .collect();
                prop_assert!(
                    top.is_subset(&want),
                    "{:?}: top-2 {:?} not within {:?}",
                    kind,
                    top,
                    want
                );
                prop_assert_eq!(
                    top.len(),
                    want.len().min(2),
                    "{:?}: reader {} query {:?}",
                    kind,
                    AGENTS[reader],
                    text
                );
                answers.push((got, top.len()));
            }
        }
        Ok(answers)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]
    #[test]
    fn sqlite_recall_matches_the_grant_model(s in scenario(true)) {
        run(MemoryBackendKind::Sqlite, &s)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(20))]
    #[test]
    fn markdown_recall_matches_the_grant_model(s in scenario(false)) {
        run(MemoryBackendKind::Markdown, &s)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]
    #[test]
    fn postgres_recall_matches_the_grant_model_and_sqlite(s in scenario(true)) {
        if postgres_url().is_some() {
            let postgres = run(MemoryBackendKind::Postgres, &s)?;
            prop_assert_eq!(postgres, run(MemoryBackendKind::Sqlite, &s)?);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]
    #[test]
    fn qdrant_recall_matches_the_grant_model_and_sqlite(s in scenario(true)) {
        let qdrant = run(MemoryBackendKind::Qdrant, &s)?;
        prop_assert_eq!(qdrant, run(MemoryBackendKind::Sqlite, &s)?);
    }
}
