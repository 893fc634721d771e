//! Warren's shared vocabulary. No I/O, few dependencies: every other crate speaks these types.
//!
//! For now: [`AgentAlias`], the validated name of an agent (SPEC PERM-1, LAYOUT-1), and the
//! session vocabulary [`SessionKey`] and [`Role`] (SESS-1). The conversation vocabulary
//! [`ChatMessage`], [`ToolCall`], [`ToolDefinition`] and [`Usage`] (LOOP-1).

mod alias;
pub mod hex;
mod message;
mod session;
pub mod sse;

pub use alias::{AgentAlias, AliasError, RESERVED_ALIAS};
pub use message::{ChatMessage, Image, ToolCall, ToolDefinition, Usage};
pub use session::{MAX_SESSION_KEY_LEN, Role, RoleError, SessionKey, SessionKeyError};
