//! The SQLite search index is derived data brought up to date before each search (SESS-1):
//! under any interleaving of appends, deletes, clears, renames and searches it returns exactly
//! the live messages and passes FTS5's own integrity check.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use proptest::prelude::*;
use warren_config::InstallRoot;
use warren_config::schema::SessionDurability;
use warren_core::{Role, SessionKey};
use warren_store::sessions::{NewMessage, SessionBackend, SqliteBackend};

#[derive(Debug, Clone)]
enum Op {
    Append(u8, u8),
    Delete(u8),
    Clear(u8),
    Rename(u8, u8),
    Search(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..3u8, 0..4u8).prop_map(|(k, w)| Op::Append(k, w)),
        1 => (0..3u8).prop_map(Op::Delete),
        1 => (0..3u8).prop_map(Op::Clear),
        1 => (0..3u8, 0..3u8).prop_map(|(a, b)| Op::Rename(a, b)),
        2 => (0..4u8).prop_map(Op::Search),
    ]
}

fn key(k: u8) -> SessionKey {
    SessionKey::new(format!("s{k}")).unwrap()
}

fn word(w: u8) -> String {
    format!("word{w}")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn search_matches_a_model_after_any_history(ops in proptest::collection::vec(op(), 1..40)) {
        let dir = tempfile::tempdir().unwrap();
        let root = InstallRoot::at(dir.path().join("w"));
        let b = SqliteBackend::open(&root, SessionDurability::Batched).unwrap();
        // Model: session -> list of words appended.
        let mut model: BTreeMap<SessionKey, Vec<String>> = BTreeMap::new();
        let check = |model: &BTreeMap<SessionKey, Vec<String>>, w: u8| {
            let mut got: Vec<(String, String)> = b
                .search(&word(w), 1000)
                .unwrap()
                .into_iter()
                .map(|h| (h.key.to_string(), h.content))
                .collect();
            got.sort();
            let mut want: Vec<(String, String)> = model
                .iter()
                .flat_map(|(k, ws)| ws.iter().filter(|x| **x == word(w)).map(move |x| (k.to_string(), x.clone())))
                .collect();
            want.sort();
            assert_eq!(got, want);
        };
        for op in ops {
            match op {
                Op::Append(k, w) => {
                    b.append(&key(k), &NewMessage::new(Role::User, word(w))).unwrap();
                    model.entry(key(k)).or_default().push(word(w));
                }
                Op::Delete(k) => {
                    b.delete(&key(k)).unwrap();
                    model.remove(&key(k));
                }
                Op::Clear(k) => {
                    if b.clear(&key(k)).is_ok() {
                        model.insert(key(k), Vec::new());
                    }
                }
                Op::Rename(a, c) => {
                    if b.rename(&key(a), &key(c)).is_ok() {
                        let v = model.remove(&key(a)).unwrap();
                        model.insert(key(c), v);
                    }
                }
                Op::Search(w) => check(&model, w),
            }
        }
        for w in 0..4 {
            check(&model, w);
        }
        let conn = rusqlite::Connection::open(root.sessions_db()).unwrap();
        conn.execute("INSERT INTO messages_fts(messages_fts) VALUES ('integrity-check')", []).unwrap();
    }
}
