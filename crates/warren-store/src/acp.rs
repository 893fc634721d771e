//! ACP protocol sessions (SPEC SESS-3, STATE-7): `data/sessions/acp-sessions.db` (WAL), a
//! store separate from chat sessions.
