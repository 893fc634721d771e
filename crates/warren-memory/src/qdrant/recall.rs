//! Scoped recall of the Qdrant store (MEM-5): the server-side filter (narrowing only) and the
//! checks on candidates: the newest live version per key, and no stale version of a key whose
//! newer version did not match.

use std::collections::HashMap;

use serde_json::{Value, json};

use super::{Http, Row, live, micros, newer};
use crate::entry::{RecallQuery, ScopeRule};
use crate::error::MemoryError;

/// The server-side part of a recall's filter: the allowlist's agents (narrowing only; the
/// exact rules are checked on every candidate), the session and the time window, and for a
/// keyword query the words on `content` or `key`.
pub(super) fn recall_filter(
    scope: &[ScopeRule],
    query: &RecallQuery,
) -> Result<Value, MemoryError> {
    let agents: Vec<&str> = scope.iter().map(|r| r.agent.as_str()).collect();
    let mut must = vec![json!({ "key": "agent_id", "match": { "any": agents } })];
    if let Some(s) = &query.session {
        must.push(json!({ "key": "session", "match": { "value": s } }));
    }
    let mut range = serde_json::Map::new();
    if let Some(t) = query.since {
        range.insert("gte".into(), json!(micros(t)));
    }
    if let Some(t) = query.until {
        range.insert("lte".into(), json!(micros(t)));
    }
    if !range.is_empty() {
        must.push(json!({ "key": "created_at", "range": range }));
    }
    let mut filter = live(json!({ "must": must }));
    if !query.is_recent() {
        let words = crate::fts::words("", &query.text)?;
        let text: Vec<&str> = words.iter().map(|w| w.text.as_str()).collect();
        let text = text.join(" ");
        filter["should"] = json!([
            { "key": "content", "match": { "text_any": text } },
            { "key": "key", "match": { "text_any": text } }
        ]);
    }
    Ok(filter)
}

/// Keeps the newest version per `(agent, key)`, in first-seen order.
pub(super) fn newest_per_key(rows: Vec<Row>) -> Vec<Row> {
    let mut at: HashMap<(String, String), usize> = HashMap::new();
    let mut out: Vec<Row> = Vec::new();
    for row in rows {
        let k = (row.entry.agent.to_string(), row.entry.key.clone());
        match at.get(&k) {
            Some(&i) => {
                if newer(&row, &out[i]) {
                    out[i] = row;
                }
            }
            None => {
                at.insert(k, out.len());
                out.push(row);
            }
        }
    }
    out
}

/// Drops rows for which a newer version of the same key exists in the collection (a leftover
/// of a write that crashed between its upsert and its archiving, or of two racing writes).
pub(super) fn drop_stale(h: &Http, rows: &mut Vec<Row>) -> Result<(), MemoryError> {
    if rows.is_empty() {
        return Ok(());
    }
    let agents: Vec<&str> = rows.iter().map(|r| r.entry.agent.as_str()).collect();
    let keys: Vec<&str> = rows.iter().map(|r| r.entry.key.as_str()).collect();
    let points = h.scroll_all(live(json!({ "must": [
        { "key": "agent_id", "match": { "any": agents } },
        { "key": "key", "match": { "any": keys } }
    ] })))?;
    let mut newest: HashMap<(String, String), (u64, i64, String)> = HashMap::new();
    for p in &points {
        let pl = &p["payload"];
        let (Some(a), Some(k)) = (pl["agent_id"].as_str(), pl["key"].as_str()) else {
            continue;
        };
        let id = p["id"].as_str().unwrap_or_default().to_string();
        let mark = (
            pl["version"].as_u64().unwrap_or(0),
            pl["updated_at"].as_i64().unwrap_or(0),
            id,
        );
        let slot = newest
            .entry((a.to_string(), k.to_string()))
            .or_insert(mark.clone());
        if mark > *slot {
            *slot = mark;
        }
    }
    rows.retain(|r| {
        newest
            .get(&(r.entry.agent.to_string(), r.entry.key.clone()))
            .is_none_or(|(_, _, point)| *point == r.point)
    });
    Ok(())
}
