//! The crate's integration tests, linked into one binary (one module per suite).

mod anthropic_wire;
mod keep_alive;
mod openai_wire;
