//! The SQLite memory file's schema (MEM-2): its tables, the scope-aware FTS5 index and its
//! triggers, the per-agent vector versions, and the migration of older files to
//! [`SCHEMA_VERSION`].

use rusqlite::{Connection, OptionalExtension};

pub(super) const SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS agents (
    id          TEXT PRIMARY KEY,          -- UUID v4
    alias       TEXT NOT NULL UNIQUE,
    backend     TEXT NOT NULL,
    created_at  INTEGER NOT NULL           -- unix microseconds, UTC
);
CREATE TABLE IF NOT EXISTS memories (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,  -- FTS rowid; never reused, so a cached
                                           -- vector cannot name a later row
    id          TEXT NOT NULL UNIQUE,      -- UUID v4
    agent_id    TEXT NOT NULL REFERENCES agents(id),
    key         TEXT NOT NULL,
    content     TEXT NOT NULL,
    category    TEXT NOT NULL,
    session     TEXT,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    embedding   BLOB,                      -- little-endian f32s
    UNIQUE (agent_id, key)
);
CREATE TABLE IF NOT EXISTS meta (
    key         TEXT PRIMARY KEY,
    value       TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS memories_agent_updated ON memories(agent_id, updated_at);
-- Earlier versions of each key (issue 20 §4): the row as it was when an overwrite, undo or
-- forget replaced it, newest `history_versions` per key.
CREATE TABLE IF NOT EXISTS memory_versions (
    agent_id    TEXT NOT NULL REFERENCES agents(id),
    key         TEXT NOT NULL,
    version     INTEGER NOT NULL,
    id          TEXT NOT NULL,
    content     TEXT NOT NULL,
    category    TEXT NOT NULL,
    session     TEXT,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    embedding   BLOB,
    trust       TEXT NOT NULL,
    prov_agent  TEXT,
    prov_session TEXT,
    prov_channel TEXT,
    prov_tool_call TEXT,
    prov_receipt TEXT,
    state       TEXT NOT NULL,             -- replaced | forgotten
    archived_at INTEGER NOT NULL,
    PRIMARY KEY (agent_id, key, version)
);
-- Per-agent write counter, bumped in the same transaction as every row change by any
-- process (triggers), so a process's cached vectors can tell foreign writes (see
-- `VectorSync`).
CREATE TABLE IF NOT EXISTS vector_versions (
    agent_id    TEXT PRIMARY KEY,
    version     INTEGER NOT NULL
);
CREATE TRIGGER IF NOT EXISTS memories_version_ai AFTER INSERT ON memories BEGIN
    INSERT INTO vector_versions (agent_id, version) VALUES (new.agent_id, 1)
        ON CONFLICT(agent_id) DO UPDATE SET version = version + 1;
END;
CREATE TRIGGER IF NOT EXISTS memories_version_au AFTER UPDATE ON memories BEGIN
    INSERT INTO vector_versions (agent_id, version) VALUES (new.agent_id, 1)
        ON CONFLICT(agent_id) DO UPDATE SET version = version + 1;
END;
CREATE TRIGGER IF NOT EXISTS memories_version_au_moved AFTER UPDATE OF agent_id ON memories
WHEN old.agent_id IS NOT new.agent_id BEGIN
    INSERT INTO vector_versions (agent_id, version) VALUES (old.agent_id, 1)
        ON CONFLICT(agent_id) DO UPDATE SET version = version + 1;
END;
CREATE TRIGGER IF NOT EXISTS memories_version_ad AFTER DELETE ON memories BEGIN
    INSERT INTO vector_versions (agent_id, version) VALUES (old.agent_id, 1)
        ON CONFLICT(agent_id) DO UPDATE SET version = version + 1;
END;
"#;

/// Crash points of versioned writes (between archiving the replaced version and changing the
/// live row): a process killed there must leave the key as it was, history included.
pub const VERSION_CRASH_POINTS: [&str; 3] = [
    "memory-store-after-archive",
    "memory-forget-after-archive",
    "memory-undo-after-archive",
];

/// Schema version kept in `meta` under `schema_version`. Version 2 made the FTS index
/// scope-aware (see [`SCOPE_COLUMN`]); version 3 added each row's version and provenance
/// ([`V3_COLUMNS`]); files without the key are version 1.
pub(super) const SCHEMA_VERSION: i64 = 3;

/// The columns version 3 adds to `memories` (issue 20 §3/§4). Rows of older files read as
/// version 1 with `agent` trust and no other provenance.
pub(super) const V3_COLUMNS: [(&str, &str); 7] = [
    ("version", "INTEGER NOT NULL DEFAULT 1"),
    ("trust", "TEXT NOT NULL DEFAULT 'agent'"),
    ("prov_agent", "TEXT"),
    ("prov_session", "TEXT"),
    ("prov_channel", "TEXT"),
    ("prov_tool_call", "TEXT"),
    ("prov_receipt", "TEXT"),
];

/// The generated `memories.scope` column (MEM-2): two opaque FTS tokens per row, one for the
/// agent and one for the agent and category, so a scoped MATCH intersects doclists inside FTS5
/// before BM25 ranks anything. Must compute exactly what [`fts::agent_token`] and
/// [`fts::category_token`] compute. Only ever narrows: the SQL `WHERE` scope stays.
pub(super) const SCOPE_COLUMN: &str = "scope TEXT GENERATED ALWAYS AS \
     ('a' || hex(agent_id) || ' c' || hex(agent_id || ':' || category)) VIRTUAL";

/// BM25 column weights of keyword recall: `key`, `content`, and 0 for `scope`, so the scope
/// tokens never move a score. Passed to `bm25()` explicitly: ordering by FTS5's `rank` column
/// makes FTS5 compile an internal sorting statement on every query, which costs more than the
/// whole scoped search at 10k rows. BM25's document length still counts the two scope tokens
/// of every row (FTS5 has no per-column length), so rows of different lengths with nearly equal
/// scores may order differently than with the version-1 index; the matching set is the same.
pub(super) const BM25_WEIGHTS: &str = "1.0, 1.0, 0.0";

/// The version-2 FTS index over the key, content and scope of each row and the triggers that
/// keep it in step. The update trigger covers every column `scope` derives from.
pub(super) const FTS_SCHEMA: &str = r#"
CREATE VIRTUAL TABLE memories_fts
    USING fts5(key, content, scope, content='memories', content_rowid='seq');
CREATE TRIGGER memories_ai AFTER INSERT ON memories BEGIN
    INSERT INTO memories_fts(rowid, key, content, scope)
        VALUES (new.seq, new.key, new.content, new.scope);
END;
CREATE TRIGGER memories_ad AFTER DELETE ON memories BEGIN
    INSERT INTO memories_fts(memories_fts, rowid, key, content, scope)
        VALUES ('delete', old.seq, old.key, old.content, old.scope);
END;
CREATE TRIGGER memories_au AFTER UPDATE OF key, content, category, agent_id ON memories BEGIN
    INSERT INTO memories_fts(memories_fts, rowid, key, content, scope)
        VALUES ('delete', old.seq, old.key, old.content, old.scope);
    INSERT INTO memories_fts(rowid, key, content, scope)
        VALUES (new.seq, new.key, new.content, new.scope);
END;
INSERT INTO memories_fts(memories_fts) VALUES ('rebuild');
"#;

/// Brings the file to [`SCHEMA_VERSION`] in one immediate transaction: a version-1 file (or a
/// new one) gets the `scope` column, a rebuilt scope-aware FTS index and its triggers. Safe to
/// run from several processes at once: the second sees the version the first committed.
pub(super) fn migrate(conn: &mut Connection) -> rusqlite::Result<()> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let version: i64 = tx
        .query_row(
            "SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'schema_version'",
            [],
            |r| r.get(0),
        )
        .optional()?
        .unwrap_or(1);
    if version >= SCHEMA_VERSION {
        return Ok(());
    }
    let has_column = |name: &str| -> rusqlite::Result<bool> {
        tx.query_row(
            "SELECT EXISTS (SELECT 1 FROM pragma_table_xinfo('memories') WHERE name = ?1)",
            [name],
            |r| r.get(0),
        )
    };
    if version < 2 {
        let has_scope = has_column("scope")?;
        tx.execute_batch(
            "DROP TRIGGER IF EXISTS memories_ai; DROP TRIGGER IF EXISTS memories_ad; \
             DROP TRIGGER IF EXISTS memories_au; DROP TABLE IF EXISTS memories_fts;",
        )?;
        if !has_scope {
            tx.execute_batch(&format!("ALTER TABLE memories ADD COLUMN {SCOPE_COLUMN};"))?;
        }
        tx.execute_batch(FTS_SCHEMA)?;
    }
    for (name, decl) in V3_COLUMNS {
        if !has_column(name)? {
            tx.execute_batch(&format!("ALTER TABLE memories ADD COLUMN {name} {decl};"))?;
        }
    }
    tx.execute(
        "INSERT INTO meta (key, value) VALUES ('schema_version', ?1) \
         ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        [SCHEMA_VERSION.to_string()],
    )?;
    tx.commit()
}
