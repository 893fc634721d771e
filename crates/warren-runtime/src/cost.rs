//! The cost ledger (STATE-14): [`CostTracker`] prices each provider request with the per-model
//! rates of `[cost.rates.<model>]` over the built-in table (`warren_config::schema::rates`,
//! dated), appends a record to `data/state/costs.jsonl` (time, agent, session, provider, model,
//! tokens in/out, cost and the rate used) and ENFORCES per-agent limits before a provider
//! call: the daily limit is the smaller of `[cost] daily_limit_usd` and the agent's risk
//! profile `max_cost_per_day_usd`; the monthly one is `[cost] monthly_limit_usd`; the daily
//! token limit is the profile's `max_tokens_per_day` (every request) or, unset, the default
//! allowance of requests to models without a rate. A rejected request (LOOP-6) is recorded
//! like any other.
//!
//! Reservation (issue 16 §4): before each call [`CostTracker::reserve`] estimates its worst
//! case (the prompt's tokens, estimated from its text, plus the most output tokens the model
//! can return, at the model's rates) and refuses the call when that could cross a limit; the
//! reservation is held in the tracker until the call's actual usage is recorded, so two
//! concurrent turns of one agent in this process cannot both pass on the same headroom.
//!
//! `[cost] enabled = false` stops writing the ledger only: the limits still hold, with the
//! process's own spend counted in memory (plus whatever the ledger already holds).
//!
//! Reload swaps rates with [`CostTracker::set_rates`]; old records keep the price they were
//! written with (the rate is stored in each record).
//!
//! Totals come from the ledger file itself: before each check the tracker reads the records
//! appended since its last look (by any process: the daemon and `warren agent` runs share the
//! file), so a limit holds across processes. Its own appends are counted as it makes them
//! when no other process wrote in between, so a check usually costs one `stat`.
//!
//! Durability: a record is written (visible to other processes, kept if this process dies)
//! when its request returns, through a handle kept open; [`CostTracker::sync`] makes the
//! turn's records durable against a power loss with ONE `fdatasync` when the turn ends,
//! instead of one per provider request.

mod estimate;
mod ledger;
mod limit;
mod tracker;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use warren_config::schema::ModelRate;
use warren_core::AgentAlias;

pub use estimate::{Estimate, estimate};
pub use ledger::{LedgerLock, format_time, read_ledger};
use limit::limit_message;
pub use limit::{AgentCaps, LimitContext};
pub use tracker::{CostTracker, Reservation};

/// One ledger line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CostRecord {
    #[serde(with = "time::serde::rfc3339")]
    pub time: OffsetDateTime,
    /// Validated when the ledger line is read (a line naming no valid alias is skipped).
    pub agent: warren_core::AgentAlias,
    pub session: Option<String>,
    pub provider: String,
    pub model: String,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost_usd: f64,
    /// The rate used (`None` = no rate configured for the model: cost 0).
    pub rate: Option<ModelRate>,
    /// The request was rejected by the loop (LOOP-6) but still billed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rejected: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum CostError {
    /// A call refused before the provider was called: a limit is reached, or the call's
    /// worst case could cross it.
    #[error("{}", limit_message(.agent, .period, .tokens, .spent, .held, .estimate, .limit, .context))]
    LimitReached {
        agent: AgentAlias,
        /// `daily` or `monthly`.
        period: &'static str,
        /// A token limit (amounts in tokens) rather than a cost limit (amounts in USD).
        tokens: bool,
        /// Used this day/month, by the ledger (and this process's unrecorded spend).
        spent: f64,
        /// Reserved by this agent's calls in flight.
        held: f64,
        /// This call's worst case (0 when the limit is simply reached).
        estimate: f64,
        limit: f64,
        context: Box<LimitContext>,
    },
    #[error("cost ledger {}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use warren_config::schema::CostConfig;
    use warren_config::schema::rates::{UNKNOWN_MAX_OUTPUT_TOKENS, UNPRICED_TOKENS_PER_DAY};
    use warren_core::Usage;
    use warren_providers::ChatRequest;

    fn config(daily: Option<f64>) -> CostConfig {
        let mut c = CostConfig {
            daily_limit_usd: daily,
            ..CostConfig::default()
        };
        c.rates.insert(
            "m".into(),
            ModelRate {
                input_per_mtok: 1_000_000.0,
                output_per_mtok: 0.0,
                max_output_tokens: None,
            },
        );
        c
    }

    #[test]
    fn crossing_warn_at_percent_warns_once_per_agent_and_day() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        // 80% of $1.00 a day; each input token costs $0.01 here.
        let mut c = config(Some(1.0));
        c.rates.insert(
            "cent".into(),
            ModelRate {
                input_per_mtok: 10_000.0,
                output_per_mtok: 0.0,
                max_output_tokens: None,
            },
        );
        let t = CostTracker::open(dir.path().join("costs.jsonl"), &c);
        let spend = |tokens: u64| {
            let r = t
                .record(
                    &al("a"),
                    None,
                    "p",
                    "cent",
                    Usage {
                        input_tokens: tokens,
                        output_tokens: 0,
                    },
                    false,
                )
                .unwrap_or_else(|e| panic!("{e}"));
            t.warning(&al("a"), None, r.cost_usd)
        };
        assert_eq!(spend(50), None, "50%");
        let warned = spend(35).expect("85% crosses the 80% mark");
        assert!(
            warned.contains("warn_at_percent = 80") && warned.contains("agent 'a'"),
            "{warned}"
        );
        assert_eq!(spend(5), None, "once a day");
        // The agent's own lower limit counts: $0.90 spent of $0.50 is past the mark already.
        assert_eq!(t.warning(&al("a"), Some(0.5), 0.01), None);
    }

    #[test]
    fn a_reload_applies_new_limits_and_enabled_to_the_running_tracker_state14() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let t = CostTracker::open(dir.path().join("costs.jsonl"), &config(Some(2.0)));
        let u = Usage {
            input_tokens: 1,
            output_tokens: 0,
        };
        t.record(&al("a"), None, "p", "m", u, true)
            .unwrap_or_else(|e| panic!("{e}"));
        t.record(&al("a"), None, "p", "m", u, true)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(t.check(&al("a"), None).is_err(), "over the old limit");
        t.apply(&config(Some(100.0)));
        assert!(
            t.check(&al("a"), None).is_ok(),
            "the raised limit applies at once"
        );
        t.apply(&config(Some(0.5)));
        assert!(
            t.check(&al("a"), None).is_err(),
            "the lowered limit applies at once"
        );
        let mut off = config(Some(0.5));
        off.enabled = false;
        t.apply(&off);
        assert!(
            !t.enabled() && t.check(&al("a"), None).is_err(),
            "disabled: the ledger is not written, the limit still holds"
        );
    }

    #[test]
    fn limits_are_enforced_before_the_call_and_survive_a_reopen_state14() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("costs.jsonl");
        let t = CostTracker::open(path.clone(), &config(Some(2.0)));
        let u = Usage {
            input_tokens: 1,
            output_tokens: 0,
        };
        assert!(t.check(&al("a"), None).is_ok());
        t.record(&al("a"), None, "p", "m", u, false)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(t.check(&al("a"), None).is_ok());
        t.record(&al("a"), None, "p", "m", u, true)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(
            t.check(&al("a"), None),
            Err(CostError::LimitReached {
                period: "daily",
                ..
            })
        ));
        assert!(t.check(&al("b"), None).is_ok(), "limits are per agent");
        let reopened = CostTracker::open(path.clone(), &config(Some(2.0)));
        assert!(reopened.check(&al("a"), None).is_err());
        assert!(
            reopened.check(&al("a"), Some(100.0)).is_err(),
            "the smaller limit wins"
        );
    }

    #[test]
    fn a_limit_holds_across_processes_sharing_the_ledger_state14() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("costs.jsonl");
        let daemon = CostTracker::open(path.clone(), &config(Some(1.0)));
        let cli = CostTracker::open(path.clone(), &config(Some(1.0)));
        assert!(daemon.check(&al("a"), None).is_ok());
        let u = Usage {
            input_tokens: 1,
            output_tokens: 0,
        };
        cli.record(&al("a"), None, "p", "m", u, false)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            daemon.check(&al("a"), None).is_err(),
            "the other process's spending counts"
        );
    }

    /// Own appends are counted as they are made, the other process's are read back from the
    /// file, and nothing is counted twice whichever order the two write in; a ledger replaced
    /// under the kept handle (an agent rename rewrites it) is written through its new file.
    #[test]
    fn interleaved_appends_of_two_processes_count_once_each_state14() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("costs.jsonl");
        let mut rates = config(Some(1.0));
        rates.rates.insert(
            "m".into(),
            ModelRate {
                input_per_mtok: 400_000.0, // one token: $0.40
                output_per_mtok: 0.0,
                max_output_tokens: None,
            },
        );
        let daemon = CostTracker::open(path.clone(), &rates);
        let cli = CostTracker::open(path.clone(), &rates);
        let u = Usage {
            input_tokens: 1,
            output_tokens: 0,
        };
        let record = |t: &CostTracker| {
            t.record(&al("a"), None, "p", "m", u, false)
                .unwrap_or_else(|e| panic!("{e}"));
        };
        record(&daemon);
        record(&cli);
        assert!(daemon.check(&al("a"), None).is_ok(), "$0.80 of $1.00");
        assert!(cli.check(&al("a"), None).is_ok(), "$0.80 of $1.00");
        record(&daemon);
        for t in [&daemon, &cli] {
            assert!(matches!(
                t.check(&al("a"), None),
                Err(CostError::LimitReached { spent, .. }) if (spent - 1.2).abs() < 1e-9
            ));
        }
        daemon.sync().unwrap_or_else(|e| panic!("{e}"));

        // The ledger is rewritten and replaced by rename; the next record goes to the new file.
        let kept = std::fs::read_to_string(&path).unwrap_or_default();
        let first_line = kept.lines().next().unwrap_or_default().to_string() + "\n";
        std::fs::write(dir.path().join("rewritten"), first_line).unwrap_or_else(|e| panic!("{e}"));
        std::fs::rename(dir.path().join("rewritten"), &path).unwrap_or_else(|e| panic!("{e}"));
        record(&daemon);
        assert_eq!(read_ledger(&path).len(), 2);
        assert!(
            daemon.check(&al("a"), None).is_ok(),
            "$0.80 after the rewrite"
        );
    }

    /// A record made while a rewrite holds the ledger waits for it and lands in the new file;
    /// without the lock it would go to the replaced file and be lost.
    #[test]
    fn an_append_during_a_rewrite_lands_in_the_new_ledger_state14() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("costs.jsonl");
        let t = std::sync::Arc::new(CostTracker::open(path.clone(), &config(None)));
        let u = Usage {
            input_tokens: 1,
            output_tokens: 0,
        };
        t.record(&al("a"), None, "p", "m", u, false)
            .unwrap_or_else(|e| panic!("{e}"));
        // The rewrite (what `warren agents rename a b` does) reads the ledger under the lock...
        let held = LedgerLock::acquire(&path).unwrap_or_else(|e| panic!("{e}"));
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let appender = {
            let t = std::sync::Arc::clone(&t);
            std::thread::spawn(move || t.record(&al("other"), None, "p", "m", u, false).is_ok())
        };
        std::thread::sleep(std::time::Duration::from_millis(200));
        // ...and replaces it while the other agent's record waits.
        std::fs::write(dir.path().join("new"), text.replace("\"a\"", "\"b\""))
            .unwrap_or_else(|e| panic!("{e}"));
        std::fs::rename(dir.path().join("new"), &path).unwrap_or_else(|e| panic!("{e}"));
        drop(held);
        assert!(appender.join().unwrap_or(false));
        let agents: Vec<String> = read_ledger(&path)
            .into_iter()
            .map(|r| r.agent.into())
            .collect();
        assert_eq!(agents, ["b", "other"]);
    }

    #[test]
    fn reload_swaps_rates_without_touching_old_records_state14() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("costs.jsonl");
        let t = CostTracker::open(path.clone(), &config(None));
        let u = Usage {
            input_tokens: 2,
            output_tokens: 0,
        };
        t.record(&al("a"), None, "p", "m", u, false)
            .unwrap_or_else(|e| panic!("{e}"));
        let mut reloaded = config(None);
        reloaded.rates.insert(
            "m".to_string(),
            ModelRate {
                input_per_mtok: 500_000.0,
                output_per_mtok: 0.0,
                max_output_tokens: None,
            },
        );
        t.apply(&reloaded);
        t.record(&al("a"), None, "p", "m", u, false)
            .unwrap_or_else(|e| panic!("{e}"));
        let costs: Vec<f64> = read_ledger(&path).iter().map(|r| r.cost_usd).collect();
        assert_eq!(costs, vec![2.0, 1.0]);
    }

    fn al(alias: &str) -> warren_core::AgentAlias {
        warren_core::AgentAlias::new(alias).unwrap_or_else(|e| panic!("{e}"))
    }

    fn usage(input: u64, output: u64) -> Usage {
        Usage {
            input_tokens: input,
            output_tokens: output,
        }
    }

    /// `m` at $1 per million tokens in and out, at most 1,000 output tokens a response.
    fn dollar_config(daily: Option<f64>) -> CostConfig {
        let mut c = config(daily);
        c.rates.insert(
            "m".into(),
            ModelRate {
                input_per_mtok: 1.0,
                output_per_mtok: 1.0,
                max_output_tokens: Some(1_000),
            },
        );
        c
    }

    fn prompt(tokens: u64) -> Estimate {
        Estimate {
            prompt_tokens: tokens,
            max_tokens: None,
        }
    }

    fn caps(cost: f64) -> AgentCaps {
        AgentCaps {
            max_cost_per_day_usd: Some(cost),
            max_tokens_per_day: None,
        }
    }

    /// Issue 16 §4: a call whose worst case (prompt + the model's most output, at its rate)
    /// could cross the daily cap is refused before it is made, naming the cap, the key and
    /// when it resets; the actual usage then replaces the reservation.
    #[test]
    fn a_call_that_could_cross_the_daily_cap_is_refused_before_it_is_made_issue16() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let t = CostTracker::open(dir.path().join("costs.jsonl"), &dollar_config(None));
        // $0.01 a day: 9,000 prompt + 1,000 output tokens = $0.01 fits exactly...
        let r = t
            .reserve(&al("a"), caps(0.01), "m", prompt(9_000))
            .unwrap_or_else(|e| panic!("{e}"));
        assert!((r.usd() - 0.01).abs() < 1e-12);
        // ...and holds the whole headroom while the call is in flight: a concurrent turn of
        // the same agent cannot pass on it.
        let second = t.reserve(&al("a"), caps(0.01), "m", prompt(1));
        assert!(
            matches!(&second, Err(CostError::LimitReached { held, .. }) if (held - 0.01).abs() < 1e-12),
            "{second:?}"
        );
        assert!(
            t.reserve(&al("b"), caps(0.01), "m", prompt(1)).is_ok(),
            "per agent"
        );
        // The call used far less than its worst case: the record replaces the reservation.
        t.record(&al("a"), None, "p", "m", usage(1_000, 10), false)
            .unwrap_or_else(|e| panic!("{e}"));
        drop(r);
        t.reserve(&al("a"), caps(0.01), "m", prompt(5_000))
            .unwrap_or_else(|e| panic!("after the record: {e}"));
        // $0.00101 spent; 8,000 + 1,000 tokens more would make $0.01001 > $0.01.
        let err = t
            .reserve(&al("a"), caps(0.01), "m", prompt(8_000))
            .expect_err("the worst case crosses the cap");
        let msg = err.to_string();
        for part in [
            "agent 'a'",
            "could cost up to $0.0090",
            "daily cost limit of $0.0100",
            "~8000 prompt + 1000 output tokens at m's rate",
            "the provider was not called",
            "resets at ",
            "T00:00:00Z",
            "max_cost_per_day_usd",
        ] {
            assert!(msg.contains(part), "{part:?} in {msg}");
        }
        // The global cap, when lower, is the one named.
        let mut global = dollar_config(Some(0.005));
        global.warn_at_percent = 0;
        t.apply(&global);
        let msg = t
            .reserve(&al("a"), caps(0.01), "m", prompt(8_000))
            .expect_err("over the global cap")
            .to_string();
        assert!(msg.contains("[cost] daily_limit_usd"), "{msg}");
    }

    #[test]
    fn the_monthly_cap_resets_on_the_first_of_next_month_issue16() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let mut c = dollar_config(None);
        c.monthly_limit_usd = Some(0.0001);
        let t = CostTracker::open(dir.path().join("costs.jsonl"), &c);
        let msg = t
            .reserve(&al("a"), caps(5.0), "m", prompt(10))
            .expect_err("over the monthly cap")
            .to_string();
        let now = OffsetDateTime::now_utc();
        let (y, m) = if now.month() == time::Month::December {
            (now.year() + 1, 1)
        } else {
            (now.year(), u8::from(now.month()) + 1)
        };
        assert!(msg.contains("monthly cost limit"), "{msg}");
        assert!(
            msg.contains(&format!("resets at {y}-{m:02}-01T00:00:00Z")),
            "{msg}"
        );
        assert!(msg.contains("[cost] monthly_limit_usd"), "{msg}");
    }

    /// `[cost] enabled = false` writes no ledger, but the spend is counted in memory and the
    /// limits still refuse.
    #[test]
    fn disabled_recording_still_enforces_the_daily_cap_issue16() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("costs.jsonl");
        let mut c = dollar_config(None);
        c.enabled = false;
        let t = CostTracker::open(path.clone(), &c);
        t.record(&al("a"), None, "p", "m", usage(9_500, 0), false)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(!path.exists(), "nothing written to the ledger");
        let err = t
            .reserve(&al("a"), caps(0.01), "m", prompt(10))
            .expect_err("$0.0095 spent + up to $0.00101 crosses $0.01");
        assert!(err.to_string().contains("daily cost limit"), "{err}");
        assert!(t.check(&al("a"), Some(0.009)).is_err(), "reached");
    }

    /// Issue 16 §4: tokens of a model without a rate count against the default allowance;
    /// a set `max_tokens_per_day` counts every request's tokens.
    #[test]
    fn max_tokens_per_day_blocks_priced_and_unpriced_models_issue16() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let t = CostTracker::open(dir.path().join("costs.jsonl"), &dollar_config(None));
        let local = "llama-local";
        assert_eq!(t.rate(local), None);
        // Unset: the default allowance of unpriced tokens.
        let near = UNPRICED_TOKENS_PER_DAY - u64::from(UNKNOWN_MAX_OUTPUT_TOKENS);
        t.record(&al("a"), None, "p", local, usage(near, 0), false)
            .unwrap_or_else(|e| panic!("{e}"));
        let msg = t
            .reserve(&al("a"), caps(5.0), local, prompt(1))
            .expect_err("over the unpriced allowance")
            .to_string();
        assert!(msg.contains("daily token limit of 2000000 tokens"), "{msg}");
        assert!(msg.contains("'llama-local', which has no rate"), "{msg}");
        assert!(msg.contains("max_tokens_per_day"), "{msg}");
        // A priced model is not limited by the unpriced allowance...
        t.reserve(&al("a"), caps(5.0), "m", prompt(1))
            .unwrap_or_else(|e| panic!("{e}"));
        // ...but a set max_tokens_per_day counts every request.
        let set = AgentCaps {
            max_cost_per_day_usd: Some(5.0),
            max_tokens_per_day: Some(UNPRICED_TOKENS_PER_DAY + 5_000),
        };
        t.reserve(&al("a"), set, local, prompt(1))
            .unwrap_or_else(|e| panic!("raised: {e}"));
        t.record(&al("a"), None, "p", "m", usage(10_000, 0), false)
            .unwrap_or_else(|e| panic!("{e}"));
        let msg = t
            .reserve(&al("a"), set, "m", prompt(1))
            .expect_err("the priced request's tokens count too")
            .to_string();
        assert!(
            msg.contains("the risk profile's max_tokens_per_day"),
            "{msg}"
        );
    }

    #[test]
    fn the_prompt_estimate_grows_with_the_conversation_and_the_tools() {
        let mut request = ChatRequest {
            messages: vec![warren_core::ChatMessage::user("x".repeat(3_000))],
            ..ChatRequest::default()
        };
        let small = estimate(&request).prompt_tokens;
        assert!((1_000..1_100).contains(&small), "{small}");
        request.tools = std::sync::Arc::new(vec![warren_core::ToolDefinition {
            name: "file_write".into(),
            description: "y".repeat(300),
            parameters: serde_json::json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        }]);
        assert!(estimate(&request).prompt_tokens > small + 100);
    }
}
