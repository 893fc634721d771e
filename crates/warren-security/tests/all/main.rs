//! The crate's integration tests, linked into one binary (one module per suite).

mod approval_rules;
mod architecture;
mod escape_sandbox;
mod escapes2;
mod escapes3;
mod layering;
mod policy;
mod sandbox;
