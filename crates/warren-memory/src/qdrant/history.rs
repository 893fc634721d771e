//! Kept versions of the Qdrant store (issue 20 §4): what `history` shows and what `undo`
//! writes back. Kept versions are points with `state` `replaced` or `forgotten`.

use serde_json::{Value, json};

use super::{Http, Row, micros, newer};
use crate::entry::{AgentId, MemoryEntry, MemoryVersion, VersionState, now};
use crate::error::MemoryError;

pub(super) fn version_of(r: Row) -> MemoryVersion {
    MemoryVersion {
        entry: r.entry,
        state: r.state,
        archived_at: r.archived_at,
    }
}

pub(super) fn no_version(agent: &AgentId, key: &str, message: impl Into<String>) -> MemoryError {
    MemoryError::NoVersion {
        agent: agent.as_str().to_string(),
        key: key.to_string(),
        message: message.into(),
    }
}

/// The entry an undo of `key` writes: version `to` (default: the newest kept one) as the next
/// version, keeping the live row's id and creation time (or the kept version's, when the key
/// was forgotten). Same rules and messages as the SQLite store.
pub(super) fn undo_plan(
    h: &Http,
    agent: &AgentId,
    key: &str,
    to: Option<u64>,
) -> Result<MemoryEntry, MemoryError> {
    let rows = h.versions(agent, key)?;
    let last = rows.iter().map(|r| r.entry.version).max().unwrap_or(0);
    let current = rows
        .iter()
        .filter(|r| r.state == VersionState::Current)
        .reduce(|a, b| if newer(b, a) { b } else { a });
    let mut kept: Vec<&Row> = rows
        .iter()
        .filter(|r| r.state != VersionState::Current)
        .collect();
    kept.sort_by_key(|r| std::cmp::Reverse(r.entry.version));
    let target = match to {
        Some(v) if current.is_some_and(|c| c.entry.version == v) => {
            return Err(no_version(
                agent,
                key,
                format!("version {v} is already the current one"),
            ));
        }
        Some(v) => match kept.iter().find(|r| r.entry.version == v) {
            Some(r) => *r,
            None if kept.is_empty() => {
                return Err(no_version(
                    agent,
                    key,
                    format!("version {v} is not kept (no earlier versions are)"),
                ));
            }
            None => {
                let list: Vec<String> = kept.iter().map(|r| r.entry.version.to_string()).collect();
                return Err(no_version(
                    agent,
                    key,
                    format!("version {v} is not kept (kept: {})", list.join(", ")),
                ));
            }
        },
        None => match kept.first() {
            Some(r) => *r,
            None if current.is_some() => {
                return Err(no_version(agent, key, "no earlier version is kept"));
            }
            None => {
                return Err(no_version(
                    agent,
                    key,
                    "no such key and no kept version of it",
                ));
            }
        },
    };
    let base = current.unwrap_or(target);
    Ok(MemoryEntry {
        id: base.entry.id.clone(),
        created_at: base.entry.created_at,
        updated_at: now(),
        version: last + 1,
        ..target.entry.clone()
    })
}

/// Marks the points of `filter` as kept versions in `state`.
pub(super) fn archive(h: &Http, filter: Value, state: VersionState) -> Result<(), MemoryError> {
    h.points(
        "/payload",
        json!({ "filter": filter, "payload": { "state": state.as_str(), "archived_at": micros(now()) } }),
    )?;
    Ok(())
}

/// Deletes the kept versions of `key` beyond the newest `keep`.
pub(super) fn prune(h: &Http, agent: &AgentId, key: &str, keep: u32) -> Result<(), MemoryError> {
    let mut kept: Vec<Row> = h
        .versions(agent, key)?
        .into_iter()
        .filter(|r| r.state != VersionState::Current)
        .collect();
    let keep = usize::try_from(keep).unwrap_or(usize::MAX);
    if kept.len() <= keep {
        return Ok(());
    }
    kept.sort_by(|a, b| {
        (b.entry.version, b.archived_at, &b.point).cmp(&(a.entry.version, a.archived_at, &a.point))
    });
    let gone: Vec<&str> = kept[keep..].iter().map(|r| r.point.as_str()).collect();
    h.points("/delete", json!({ "points": gone }))?;
    Ok(())
}
