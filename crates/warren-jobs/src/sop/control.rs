//! The SOP verbs of the typed control seam (issue 34 §3): `warren sop run|approve|deny|cancel`
//! build one [`SopOp`], and one executor runs it, [`Engine::run_op`] — on the daemon's engine
//! (it owns the run: restores it after a crash, serves its gate), or, with no daemon, on an
//! engine of the CLI's process over that process's stores, where a started run goes to its
//! end. The seam itself (the one `AdminOp` enum, the `Control` trait) is
//! `warren_gateway::control`.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use warren_store::sop::SopRun;

use super::{Engine, SopError};

/// One SOP verb, as the CLI asks for it and the daemon's admin route receives it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum SopOp {
    /// Start a run of the SOP `name`; `input` is a JSON object (`{{input.<field>}}`).
    SopRun {
        name: String,
        #[serde(default = "empty_object")]
        input: Value,
    },
    /// Approve or deny the gate `step` of the waiting run `run`.
    SopDecide {
        run: String,
        step: String,
        approved: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        who: String,
    },
    /// Ask the active run `run` to stop.
    SopCancel { run: String, who: String },
}

fn empty_object() -> Value {
    json!({})
}

/// The wire names of the SOP verbs.
pub const SOP_OPS: &[&str] = &["sop_run", "sop_decide", "sop_cancel"];

impl SopOp {
    /// The verb's name, as on the wire.
    pub fn name(&self) -> &'static str {
        match self {
            SopOp::SopRun { .. } => "sop_run",
            SopOp::SopDecide { .. } => "sop_decide",
            SopOp::SopCancel { .. } => "sop_cancel",
        }
    }
}

/// Whether a started run is awaited here: `Detach` (the daemon owns it and answers at once)
/// or `ToEnd` (no daemon: this process runs it to its end, telling `started` its id first, so
/// the operator can decide its gates from another shell).
pub enum Await<'a> {
    Detach,
    ToEnd(&'a (dyn Fn(&SopRun) + Send + Sync)),
}

impl Engine {
    /// THE executor of a [`SopOp`]: `{"run": RUN, "warning": ...}` for a start (the warning
    /// when runs are kept in memory only), `{"run", "step", "decision"}` for a decision,
    /// `{"run", "sop", "owner_pid", "cancel_requested"}` for a cancel.
    pub async fn run_op(self: &Arc<Self>, op: &SopOp, wait: Await<'_>) -> Result<Value, SopError> {
        match op {
            SopOp::SopRun { name, input } => {
                let (run, handle) = self.start_run(name, "manual", input.clone()).await?;
                let run = match wait {
                    Await::Detach => run,
                    Await::ToEnd(started) => {
                        started(&run);
                        handle.await.ok().flatten().unwrap_or(run)
                    }
                };
                let mut body = json!({"run": run});
                if let Some(w) = self.fallback() {
                    body["warning"] = w.into();
                }
                Ok(body)
            }
            SopOp::SopDecide {
                run,
                step,
                approved,
                reason,
                who,
            } => {
                self.decide(run, step, *approved, who, reason.clone())
                    .await?;
                let decision = if *approved { "approved" } else { "denied" };
                Ok(json!({"run": run, "step": step, "decision": decision}))
            }
            SopOp::SopCancel { run, who } => {
                let r = self.cancel(run, who).await?;
                Ok(json!({"run": r.id, "sop": r.sop, "owner_pid": r.owner_pid,
                          "cancel_requested": true}))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every SOP verb round-trips in its wire form; a start's input defaults to `{}`.
    #[test]
    fn every_sop_verb_round_trips_in_its_wire_form_issue34() {
        let ops = [
            (
                SopOp::SopRun {
                    name: "triage".into(),
                    input: json!({"ticket": "42"}),
                },
                r#"{"op":"sop_run","name":"triage","input":{"ticket":"42"}}"#,
            ),
            (
                SopOp::SopDecide {
                    run: "sop-1".into(),
                    step: "gate".into(),
                    approved: false,
                    reason: Some("not today".into()),
                    who: "cli:ops".into(),
                },
                r#"{"op":"sop_decide","run":"sop-1","step":"gate","approved":false,"reason":"not today","who":"cli:ops"}"#,
            ),
            (
                SopOp::SopCancel {
                    run: "sop-1".into(),
                    who: "cli:ops".into(),
                },
                r#"{"op":"sop_cancel","run":"sop-1","who":"cli:ops"}"#,
            ),
        ];
        for (op, wire) in ops {
            assert_eq!(serde_json::to_string(&op).unwrap_or_default(), wire);
            let back: SopOp = serde_json::from_str(wire).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(back, op);
            assert!(SOP_OPS.contains(&op.name()) && wire.contains(op.name()));
        }
        let bare: SopOp = serde_json::from_str(r#"{"op":"sop_run","name":"triage"}"#)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            bare,
            SopOp::SopRun {
                name: "triage".into(),
                input: json!({})
            }
        );
        assert!(serde_json::from_str::<SopOp>(r#"{"op":"sop_cancel","run":"r"}"#).is_err());
    }
}
