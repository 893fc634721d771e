//! Chat channels: the durable inbox/outbox, delivery, chunking, sender policy and the platform
//! adapters (Telegram first); a layer-5 client of the engine, started by the daemon as a
//! generation hook.

pub mod admin;
pub mod approvals;
pub mod chunk;
pub mod health;
pub mod inbound;
pub mod media;
pub mod platform;
pub mod supervisor;
pub mod telegram;

pub use supervisor::Channels;
