//! Warren's shared vocabulary. No I/O, few dependencies: every other crate speaks these types.
//!
//! For now: [`AgentAlias`], the validated name of an agent (SPEC PERM-1, LAYOUT-1). Later issues
//! add ids, session keys, messages and tool calls here.

mod alias;

pub use alias::{AgentAlias, AliasError, RESERVED_ALIAS};
