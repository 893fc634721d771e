//! The per-agent cap of a backup (issue 35 §8): an agent that filled its workspace does not
//! make every backup as large as its files. The plan counts the bytes each agent's workspace
//! occupies on disk (allocated blocks, so a sparse file counts its data, as the backup stores
//! it); a workspace over the cap is left out of the backup — its directory is kept, its
//! contents are not — with a warning that names the agent, its size, the cap and how to raise
//! it (`warren backup --max-agent-mb N`, 0 for no cap). Everything else is backed up as usual.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Component, Path};

use rustix::fs::AtFlags;
use warren_config::InstallRoot;
use warren_config::confined::ConfinedDir;

use warren_config::confined::FileKind;

/// The cap `warren backup` applies unless told otherwise, in MB (10^6 bytes).
pub const DEFAULT_MAX_AGENT_MB: u64 = 10_240;

/// Bytes the file `name` in `dir` of length `len` occupies on disk (at most `len`: a sparse
/// file counts its data); `len` when it cannot be told.
pub(super) fn on_disk(dir: &ConfinedDir, name: &OsStr, len: u64) -> u64 {
    rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW).map_or(len, |st| {
        len.min(u64::try_from(st.st_blocks).unwrap_or(0).saturating_mul(512))
    })
}

/// The agent whose workspace holds `rel` (strictly below `agents/<alias>/workspace/`).
fn workspace_owner<'p>(agents: &Path, rel: &'p Path) -> Option<&'p str> {
    let rest = rel.strip_prefix(agents).ok()?;
    let mut parts = rest.components();
    let (Some(Component::Normal(alias)), Some(Component::Normal(ws)), Some(_)) =
        (parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    (ws == "workspace").then(|| alias.to_str()).flatten()
}

/// One entry found by the plan.
pub(super) struct Planned {
    pub(super) rel: std::path::PathBuf,
    pub(super) kind: FileKind,
    pub(super) size: u64,
    /// Bytes on disk (a sparse file's data, not its length), for this module.
    pub(super) allocated: u64,
    pub(super) mode: u32,
}

/// Leaves out of `plan` the contents of every workspace over `max_bytes`; one warning each.
pub(super) fn apply(root: &InstallRoot, plan: &mut Vec<Planned>, max_bytes: u64) -> Vec<String> {
    let agents = root
        .agents_dir()
        .strip_prefix(root.root())
        .map(Path::to_path_buf)
        .unwrap_or_else(|_| "agents".into());
    let mut used: BTreeMap<String, u64> = BTreeMap::new();
    for item in plan.iter() {
        if let Some(alias) = workspace_owner(&agents, &item.rel) {
            *used.entry(alias.to_string()).or_default() += item.allocated;
        }
    }
    used.retain(|_, bytes| *bytes > max_bytes);
    if used.is_empty() {
        return Vec::new();
    }
    plan.retain(|item| workspace_owner(&agents, &item.rel).is_none_or(|a| !used.contains_key(a)));
    used.iter()
        .map(|(alias, bytes)| {
            format!(
                "agent '{alias}' uses {:.1} MB in {}, over the per-agent backup cap of {} MB: its workspace files are NOT in this backup (the rest is); raise the cap with `warren backup --max-agent-mb N` (0 = no cap) or free space in that workspace",
                *bytes as f64 / 1e6,
                root.agents_dir().join(alias).join("workspace").display(),
                max_bytes / 1_000_000
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_files_strictly_below_a_workspace_belong_to_its_agent() {
        let agents = Path::new("agents");
        for (rel, want) in [
            ("agents/a/workspace/f", Some("a")),
            ("agents/a/workspace/d/f", Some("a")),
            ("agents/a/workspace", None),
            ("agents/a/identity.md", None),
            ("data/agents/a/workspace/f", None),
        ] {
            assert_eq!(workspace_owner(agents, Path::new(rel)), want, "{rel}");
        }
    }
}
