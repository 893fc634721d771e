//! The crate's integration tests, linked into one binary (one module per suite).

mod egress;
mod egress_issue35;
mod session_policy;
mod session_squat;
mod subagent_limits;
mod turn;
