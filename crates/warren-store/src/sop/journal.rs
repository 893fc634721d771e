//! A SOP run's journal in the store: its recorded steps ([`SopStore::record_step`], read back
//! by a resumed run), its events and its approval decisions.

use rusqlite::{OptionalExtension, params};

use super::{Approval, Event, SopStore, SopStoreError, StepRecord, stamp};

impl SopStore {
    /// Records a step's output and receipt (its side effect happened); the run does not move.
    pub fn record_step(&self, run_id: &str, step: &StepOutcome<'_>) -> Result<(), SopStoreError> {
        self.conn()
            .execute(
                "INSERT INTO steps (run_id, step_id, idx, kind, status, output, receipt, recorded_at)
                 VALUES (?1, ?2, ?3, ?4, 'recorded', ?5, ?6, ?7)
                 ON CONFLICT (run_id, step_id) DO NOTHING",
                params![
                    run_id,
                    step.step_id,
                    step.idx,
                    step.kind,
                    step.output,
                    step.receipt,
                    stamp()
                ],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// The recorded step `step_id` of `run_id`, if it ran.
    pub fn step(&self, run_id: &str, step_id: &str) -> Result<Option<StepRecord>, SopStoreError> {
        self.conn()
            .query_row(
                &format!("SELECT {STEP_COLUMNS} FROM steps WHERE run_id = ?1 AND step_id = ?2"),
                params![run_id, step_id],
                step_row,
            )
            .optional()
            .map_err(|e| self.err(e))
    }

    pub fn steps(&self, run_id: &str) -> Result<Vec<StepRecord>, SopStoreError> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare(&format!(
                "SELECT {STEP_COLUMNS} FROM steps WHERE run_id = ?1 ORDER BY idx"
            ))
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(params![run_id], step_row)
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<Vec<_>, _>>().map_err(|e| self.err(e))
    }

    pub fn event(
        &self,
        run_id: &str,
        who: &str,
        what: &str,
        why: Option<&str>,
    ) -> Result<(), SopStoreError> {
        self.conn()
            .execute(
                "INSERT INTO events (run_id, at, who, what, why) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![run_id, stamp(), who, what, why],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    pub fn events(&self, run_id: &str) -> Result<Vec<Event>, SopStoreError> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare("SELECT at, who, what, why FROM events WHERE run_id = ?1 ORDER BY seq")
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(params![run_id], |r| {
                Ok(Event {
                    at: r.get(0)?,
                    who: r.get(1)?,
                    what: r.get(2)?,
                    why: r.get(3)?,
                })
            })
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<Vec<_>, _>>().map_err(|e| self.err(e))
    }

    /// The operator's decision on the gate `step_id` of the waiting run `run_id`.
    pub fn decide(
        &self,
        run_id: &str,
        step_id: &str,
        approved: bool,
        who: &str,
        reason: Option<&str>,
    ) -> Result<(), SopStoreError> {
        let run = self
            .get(run_id)?
            .ok_or_else(|| SopStoreError::NotFound(run_id.into()))?;
        let current = run
            .definition
            .get("steps")
            .and_then(|s| s.get(run.step_index as usize))
            .and_then(|s| s.get("id"))
            .and_then(|s| s.as_str())
            .unwrap_or_default()
            .to_string();
        if run.status != "waiting" || current != step_id {
            return Err(SopStoreError::NotWaiting {
                id: run_id.into(),
                step: step_id.into(),
                status: if run.status == "waiting" {
                    format!("waiting at step '{current}'")
                } else {
                    run.status
                },
            });
        }
        let decision = if approved { "approved" } else { "denied" };
        let mut conn = self.conn();
        let tx = conn.transaction().map_err(|e| self.err(e))?;
        let now = stamp();
        tx.execute(
            "INSERT INTO approvals (run_id, step_id, decision, who, reason, at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (run_id, step_id) DO NOTHING",
            params![run_id, step_id, decision, who, reason, now],
        )
        .map_err(|e| self.err(e))?;
        tx.execute(
            "INSERT INTO events (run_id, at, who, what, why) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![run_id, now, who, format!("{decision} {step_id}"), reason],
        )
        .map_err(|e| self.err(e))?;
        tx.commit().map_err(|e| self.err(e))
    }

    pub fn approval(&self, run_id: &str, step_id: &str) -> Result<Option<Approval>, SopStoreError> {
        self.conn()
            .query_row(
                "SELECT decision, who, reason, at FROM approvals WHERE run_id = ?1 AND step_id = ?2",
                params![run_id, step_id],
                |r| {
                    Ok(Approval {
                        decision: r.get(0)?,
                        who: r.get(1)?,
                        reason: r.get(2)?,
                        at: r.get(3)?,
                    })
                },
            )
            .optional()
            .map_err(|e| self.err(e))
    }
}

/// A step's outcome to record.
#[derive(Debug, Clone)]
pub struct StepOutcome<'a> {
    pub step_id: &'a str,
    pub idx: u32,
    pub kind: &'a str,
    pub output: &'a str,
    pub receipt: Option<&'a str>,
}

const STEP_COLUMNS: &str = "step_id, idx, kind, status, output, receipt, recorded_at, done_at";

fn step_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<StepRecord> {
    Ok(StepRecord {
        step_id: r.get(0)?,
        idx: r.get(1)?,
        kind: r.get(2)?,
        status: r.get(3)?,
        output: r.get(4)?,
        receipt: r.get(5)?,
        recorded_at: r.get(6)?,
        done_at: r.get(7)?,
    })
}
