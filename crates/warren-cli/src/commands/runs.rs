//! `warren runs list [--agent A] [--json]`, `warren runs cancel ID` (STATE-11): the background
//! runs of the control plane (`data/control_plane.db`; cron runs and background delegates).
//! Listing never creates the file. A cancel is a request on the run's row; the owning daemon
//! acts on it when nudged (`POST /admin/cron/wake`; a background delegate checks its row every
//! half second); a run whose owner is provably gone (`StoredOwner::is_alive`: also a PID now
//! held by a process that started at another time) is marked `lost` instead.

use std::process::ExitCode;

use warren_config::InstallRoot;

use crate::cli::RunsCommand;

pub fn run(root: &InstallRoot, cmd: RunsCommand, json: bool) -> anyhow::Result<ExitCode> {
    match cmd {
        RunsCommand::List { agent, limit } => {
            let runs = match super::stores(root).control_plane_existing()? {
                Some(cp) => cp.list(agent.as_deref(), limit)?,
                None => Vec::new(),
            };
            if json {
                super::print_json(&serde_json::to_value(&runs)?)?;
                return Ok(ExitCode::SUCCESS);
            }
            if runs.is_empty() {
                println!("no background runs");
                return Ok(ExitCode::SUCCESS);
            }
            let mut table = crate::output::Table::new(&[
                "ID", "KIND", "AGENT", "LABEL", "STATE", "PID", "STARTED", "ERROR",
            ]);
            for r in &runs {
                table.row(vec![
                    r.id.to_string(),
                    r.kind.to_string(),
                    r.agent.to_string(),
                    r.label.to_string(),
                    r.state.to_string(),
                    r.owner.pid.to_string(),
                    r.started_at.to_string(),
                    r.error.clone().unwrap_or_default(),
                ]);
            }
            table.print();
            Ok(ExitCode::SUCCESS)
        }
        RunsCommand::Cancel { id } => {
            let cp = super::stores(root).control_plane()?;
            let run = cp.request_cancel(&id)?;
            if !run.owner_alive() {
                cp.reap()?;
                println!(
                    "run {id}: its owner (pid {}) is gone; marked lost",
                    run.owner.pid
                );
                return Ok(ExitCode::SUCCESS);
            }
            if let Err(e) = warren_gateway::client::admin_call(root, "POST", "/admin/cron/wake") {
                eprintln!(
                    "warning: the owning daemon was not reached ({e}); the request stays on the run"
                );
            }
            println!("run {id}: cancel requested (owner pid {})", run.owner.pid);
            Ok(ExitCode::SUCCESS)
        }
    }
}
