//! The PostgreSQL memory store's connections: the shared client made on first use (creating
//! the schema) and re-made after it drops, a fresh connection for each transaction, and
//! queries on the shared client.

use std::sync::Arc;

use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, NoTls, Row};

use crate::error::MemoryError;

use super::*;

impl PostgresStore {
    /// The live client, connecting (and creating the schema) when there is none.
    pub(super) async fn client(&self) -> Result<Arc<Client>, MemoryError> {
        let mut guard = self.client.lock().await;
        if let Some(c) = guard.as_ref()
            && !c.is_closed()
        {
            return Ok(Arc::clone(c));
        }
        let client = self.fresh().await?;
        let s = &self.schema;
        client
            .batch_execute(&format!(
                r#"BEGIN;
                SELECT pg_advisory_xact_lock(hashtext('warren-memory-schema'));
                CREATE SCHEMA IF NOT EXISTS "{s}";
                CREATE TABLE IF NOT EXISTS "{s}".agents (
                    id          UUID PRIMARY KEY,
                    alias       TEXT NOT NULL UNIQUE,
                    backend     TEXT NOT NULL,
                    created_at  TIMESTAMPTZ NOT NULL
                );
                CREATE TABLE IF NOT EXISTS "{s}".memories (
                    seq         BIGSERIAL PRIMARY KEY,
                    id          UUID NOT NULL UNIQUE,
                    agent_id    UUID NOT NULL REFERENCES "{s}".agents(id),
                    key         TEXT NOT NULL,
                    content     TEXT NOT NULL,
                    category    TEXT NOT NULL,
                    session     TEXT,
                    created_at  TIMESTAMPTZ NOT NULL,
                    updated_at  TIMESTAMPTZ NOT NULL,
                    embedding   REAL[],
                    tsv         TSVECTOR GENERATED ALWAYS AS
                                  (to_tsvector('simple', key || ' ' || content)) STORED,
                    UNIQUE (agent_id, key)
                );
                CREATE TABLE IF NOT EXISTS "{s}".meta (
                    key         TEXT PRIMARY KEY,
                    value       TEXT NOT NULL
                );
                -- Per-agent write counter bumped by a trigger in the writing transaction, so
                -- each process's cached vectors can tell writes made by other processes.
                CREATE TABLE IF NOT EXISTS "{s}".vector_versions (
                    agent_id    UUID PRIMARY KEY,
                    version     BIGINT NOT NULL
                );
                CREATE OR REPLACE FUNCTION "{s}".bump_vector_version() RETURNS trigger
                LANGUAGE plpgsql AS $fn$
                BEGIN
                    IF TG_OP <> 'DELETE' THEN
                        INSERT INTO "{s}".vector_versions AS v (agent_id, version)
                            VALUES (NEW.agent_id, 1)
                            ON CONFLICT (agent_id) DO UPDATE SET version = v.version + 1;
                    END IF;
                    IF TG_OP = 'DELETE'
                        OR (TG_OP = 'UPDATE' AND OLD.agent_id IS DISTINCT FROM NEW.agent_id) THEN
                        INSERT INTO "{s}".vector_versions AS v (agent_id, version)
                            VALUES (OLD.agent_id, 1)
                            ON CONFLICT (agent_id) DO UPDATE SET version = v.version + 1;
                    END IF;
                    RETURN NULL;
                END
                $fn$;
                DO $do$
                BEGIN
                    IF NOT EXISTS (SELECT 1 FROM pg_trigger
                                   WHERE tgname = 'memories_vector_version'
                                     AND tgrelid = '"{s}".memories'::regclass) THEN
                        CREATE TRIGGER memories_vector_version
                            AFTER INSERT OR UPDATE OR DELETE ON "{s}".memories
                            FOR EACH ROW EXECUTE FUNCTION "{s}".bump_vector_version();
                    END IF;
                END
                $do$;
                -- Version and provenance of each row (issue 20): added to existing tables,
                -- whose rows read as version 1 written with `agent` trust.
                ALTER TABLE "{s}".memories
                    ADD COLUMN IF NOT EXISTS version BIGINT NOT NULL DEFAULT 1,
                    ADD COLUMN IF NOT EXISTS trust TEXT NOT NULL DEFAULT 'agent',
                    ADD COLUMN IF NOT EXISTS prov_agent TEXT,
                    ADD COLUMN IF NOT EXISTS prov_session TEXT,
                    ADD COLUMN IF NOT EXISTS prov_channel TEXT,
                    ADD COLUMN IF NOT EXISTS prov_tool_call TEXT,
                    ADD COLUMN IF NOT EXISTS prov_receipt TEXT;
                -- Earlier versions of each key, newest `history_versions` per key.
                CREATE TABLE IF NOT EXISTS "{s}".memory_versions (
                    agent_id    UUID NOT NULL REFERENCES "{s}".agents(id),
                    key         TEXT NOT NULL,
                    version     BIGINT NOT NULL,
                    id          UUID NOT NULL,
                    content     TEXT NOT NULL,
                    category    TEXT NOT NULL,
                    session     TEXT,
                    created_at  TIMESTAMPTZ NOT NULL,
                    updated_at  TIMESTAMPTZ NOT NULL,
                    embedding   REAL[],
                    trust       TEXT NOT NULL,
                    prov_agent  TEXT,
                    prov_session TEXT,
                    prov_channel TEXT,
                    prov_tool_call TEXT,
                    prov_receipt TEXT,
                    state       TEXT NOT NULL,
                    archived_at TIMESTAMPTZ NOT NULL,
                    PRIMARY KEY (agent_id, key, version)
                );
                CREATE INDEX IF NOT EXISTS memories_tsv ON "{s}".memories USING GIN (tsv);
                CREATE INDEX IF NOT EXISTS memories_agent_updated
                    ON "{s}".memories (agent_id, updated_at);
                COMMIT;"#
            ))
            .await
            .map_err(|e| self.pg(e))?;
        let client = Arc::new(client);
        *guard = Some(Arc::clone(&client));
        Ok(client)
    }

    /// A new connection of its own (for transactions, which must not share the client).
    pub(super) async fn fresh(&self) -> Result<Client, MemoryError> {
        let (client, connection) = self.config.connect(NoTls).await.map_err(|e| self.pg(e))?;
        let url = self.display_url.clone();
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::warn!(url = %url, error = %e, "PostgreSQL memory connection closed");
            }
        });
        Ok(client)
    }

    pub(super) async fn query(&self, sql: &str, params: &[Param]) -> Result<Vec<Row>, MemoryError> {
        let client = self.client().await?;
        let refs: Vec<&(dyn ToSql + Sync)> = params
            .iter()
            .map(|p| p.as_ref() as &(dyn ToSql + Sync))
            .collect();
        client.query(sql, &refs).await.map_err(|e| self.pg(e))
    }
}
