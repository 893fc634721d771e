//! The crate's integration tests, linked into one binary (one module per suite).

mod acp;
mod agent;
mod agent_repl;
mod cli;
mod config_faults;
mod crash;
mod cron;
mod daemon;
mod daemon_chat;
mod delegate;
mod first_run;
mod gateway;
mod gateway_robustness;
mod git_cli;
mod lifecycle;
mod log_level;
mod memory;
mod openai_endpoint;
mod secrets_cli;
mod security;
mod security_selftest;
mod sessions_cli;
mod sessions_crash;
mod sessions_faults;
mod sessions_policy;
mod sop;
