//! The crate's integration tests, linked into one binary (one module per suite).

mod architecture;
mod escape_sandbox;
mod policy;
mod sandbox;
