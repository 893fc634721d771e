//! Qdrant points as memory rows (MEM-2): a point's payload decoded into a [`Row`] (a point
//! that does not decode is a [`PointError`] naming the point and field), an entry encoded as
//! a payload, the filters that select an agent's or a key's points, and live rows.

use serde_json::{Value, json};
use time::OffsetDateTime;
use warren_core::AgentAlias;

use crate::entry::{AgentId, MemoryEntry, Provenance, VersionState};

/// One decoded point.
pub(super) struct Row {
    pub(super) entry: MemoryEntry,
    pub(super) score: f64,
    /// The point's own id (each version is a point; `entry.id` stays the key's id).
    pub(super) point: String,
    pub(super) state: VersionState,
    pub(super) archived_at: Option<OffsetDateTime>,
}

/// Whether `a` is a later version of its key than `b`: higher version, then later update,
/// then the larger point id (so every reader picks the same one of two equal writes).
pub(super) fn newer(a: &Row, b: &Row) -> bool {
    (a.entry.version, a.entry.updated_at, &a.point)
        > (b.entry.version, b.entry.updated_at, &b.point)
}

/// The condition that leaves out kept versions (`state` replaced or forgotten): live rows.
pub(super) fn not_live() -> Value {
    json!({ "key": "state", "match": { "any": ["replaced", "forgotten"] } })
}

/// `filter` limited to live rows.
pub(super) fn live(mut filter: Value) -> Value {
    match filter["must_not"].as_array_mut() {
        Some(m) => m.push(not_live()),
        None => filter["must_not"] = json!([not_live()]),
    }
    filter
}

pub(super) fn micros(t: OffsetDateTime) -> i64 {
    i64::try_from(t.unix_timestamp_nanos() / 1000).unwrap_or(i64::MAX)
}

/// Why a point does not decode into a memory row (the store adds its URL and collection).
#[derive(Debug, thiserror::Error)]
pub(super) enum PointError {
    #[error("point {point} has no text field {field:?}")]
    NoText { point: Value, field: String },
    #[error("point {point} has no integer field {field:?}")]
    NoInteger { point: Value, field: String },
    #[error("point {point} has an unknown state {state}")]
    State { point: String, state: Value },
    #[error("{0}")]
    Time(#[from] time::error::ComponentRange),
    #[error("{0}")]
    Agent(#[from] warren_core::AliasError),
}

pub(super) fn instant(us: i64) -> Result<OffsetDateTime, PointError> {
    Ok(OffsetDateTime::from_unix_timestamp_nanos(
        i128::from(us) * 1000,
    )?)
}

pub(super) fn row_of(point: &Value) -> Result<Row, PointError> {
    let p = &point["payload"];
    let text = |field: &str| {
        p[field]
            .as_str()
            .map(String::from)
            .ok_or_else(|| PointError::NoText {
                point: point["id"].clone(),
                field: field.into(),
            })
    };
    let int = |field: &str| {
        p[field].as_i64().ok_or_else(|| PointError::NoInteger {
            point: point["id"].clone(),
            field: field.into(),
        })
    };
    let point_id = match &point["id"] {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let id = p["id"]
        .as_str()
        .map_or_else(|| point_id.clone(), String::from);
    let state = p["state"]
        .as_str()
        .map_or(Some(VersionState::Current), VersionState::parse)
        .ok_or_else(|| PointError::State {
            point: point_id.clone(),
            state: p["state"].clone(),
        })?;
    let archived_at = match p["archived_at"].as_i64() {
        Some(us) => Some(instant(us)?),
        None => None,
    };
    let agent = AgentAlias::new(text("agent_id")?)?;
    let provenance: Provenance =
        serde_json::from_value(p["provenance"].clone()).unwrap_or_default();
    Ok(Row {
        entry: MemoryEntry {
            id,
            agent,
            key: text("key")?,
            content: text("content")?,
            category: text("category")?,
            session: p["session"].as_str().map(String::from),
            created_at: instant(int("created_at")?)?,
            updated_at: instant(int("updated_at")?)?,
            version: p["version"].as_u64().unwrap_or(0),
            provenance,
        },
        score: point["score"].as_f64().unwrap_or(1.0),
        point: point_id,
        state,
        archived_at,
    })
}

pub(super) fn agent_filter(agent: &AgentId) -> Value {
    json!({ "must": [ { "key": "agent_id", "match": { "value": agent.as_str() } } ] })
}

pub(super) fn key_filter(agent: &AgentId, key: &str) -> Value {
    json!({ "must": [
        { "key": "agent_id", "match": { "value": agent.as_str() } },
        { "key": "key", "match": { "value": key } }
    ] })
}

pub(super) fn payload(agent: &AgentId, e: &MemoryEntry) -> Value {
    let mut p = json!({
        "id": e.id,
        "state": VersionState::Current.as_str(),
        "agent_id": agent.as_str(),
        "key": e.key,
        "content": e.content,
        "category": e.category,
        "created_at": micros(e.created_at),
        "updated_at": micros(e.updated_at),
        "version": e.version,
        "provenance": e.provenance,
    });
    if let Some(s) = &e.session {
        p["session"] = json!(s);
    }
    p
}
