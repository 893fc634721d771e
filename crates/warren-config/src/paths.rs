//! `InstallRoot`: the one owner of every path of the install layout (SPEC LAYOUT-1, LAYOUT-2).
//!
//! No other code joins path strings onto the install root; ask this type instead. Resolution
//! order: `--config-dir DIR` > `WARREN_HOME` > `~/.warren`.

use std::ffi::OsString;
use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use warren_core::AgentAlias;

/// Environment variable that moves the install root (below `--config-dir`, above `~/.warren`).
pub const HOME_ENV: &str = "WARREN_HOME";

/// Why the install root could not be resolved or prepared.
#[derive(Debug, thiserror::Error)]
pub enum PathError {
    #[error("--config-dir must not be empty")]
    EmptyConfigDir,
    #[error("{HOME_ENV} is set but empty; unset it or point it at a directory")]
    EmptyHomeEnv,
    #[error(
        "cannot find a home directory for the default install root ~/.warren; pass --config-dir DIR or set {HOME_ENV}"
    )]
    NoHome,
    #[error("cannot determine the current directory to resolve '{path}': {cause}")]
    CurrentDir { path: PathBuf, cause: io::Error },
    #[error("install root {path} is not usable: {cause}")]
    Prepare { path: PathBuf, cause: io::Error },
    #[error("install root {path} exists but is not a directory")]
    NotADirectory { path: PathBuf },
}

/// The resolved `<install>` directory and every path below it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstallRoot {
    root: PathBuf,
}

impl InstallRoot {
    /// Resolves the root from explicit inputs (testable without touching the environment):
    /// `config_dir` (the `--config-dir` flag) wins over `home_env` (`WARREN_HOME`), which wins
    /// over `<home>/.warren`. Relative paths are made absolute against the current directory.
    pub fn resolve(
        config_dir: Option<&Path>,
        home_env: Option<OsString>,
        home: Option<PathBuf>,
    ) -> Result<Self, PathError> {
        let chosen = match (config_dir, home_env) {
            (Some(dir), _) if dir.as_os_str().is_empty() => return Err(PathError::EmptyConfigDir),
            (Some(dir), _) => dir.to_path_buf(),
            (None, Some(env)) if env.is_empty() => return Err(PathError::EmptyHomeEnv),
            (None, Some(env)) => PathBuf::from(env),
            (None, None) => home
                .filter(|h| !h.as_os_str().is_empty())
                .ok_or(PathError::NoHome)?
                .join(".warren"),
        };
        let root = if chosen.is_absolute() {
            chosen
        } else {
            std::env::current_dir()
                .map_err(|cause| PathError::CurrentDir {
                    path: chosen.clone(),
                    cause,
                })?
                .join(chosen)
        };
        Ok(Self { root })
    }

    /// Resolves from the process environment (`WARREN_HOME`, `HOME`).
    pub fn from_env(config_dir: Option<&Path>) -> Result<Self, PathError> {
        Self::resolve(
            config_dir,
            std::env::var_os(HOME_ENV),
            std::env::var_os("HOME").map(PathBuf::from),
        )
    }

    /// An install root at exactly `root` (must be absolute; tests and tools).
    pub fn at(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    // ---- files at the root -------------------------------------------------------------
    pub fn config_file(&self) -> PathBuf {
        self.root.join("config.toml")
    }
    pub fn config_backup(&self) -> PathBuf {
        self.root.join("config.toml.bak")
    }
    pub fn secret_key(&self) -> PathBuf {
        self.root.join(".secret_key")
    }

    // ---- data/ ------------------------------------------------------------------------
    pub fn data_dir(&self) -> PathBuf {
        self.root.join("data")
    }
    pub fn sessions_dir(&self) -> PathBuf {
        self.data_dir().join("sessions")
    }
    pub fn sessions_db(&self) -> PathBuf {
        self.sessions_dir().join("sessions.db")
    }
    pub fn acp_sessions_db(&self) -> PathBuf {
        self.sessions_dir().join("acp-sessions.db")
    }
    /// Cross-process lock of the sessions directory: JSONL mutations and the JSONL→SQLite
    /// migration hold it (SESS-2, MIG-1).
    pub fn sessions_lock(&self) -> PathBuf {
        self.sessions_dir().join(".sessions.lock")
    }
    /// Present once a JSONL import receipt is committed: JSONL mutation stays off (MIG-4).
    pub fn sessions_jsonl_fence(&self) -> PathBuf {
        self.sessions_dir().join(".jsonl-migrated")
    }
    pub fn cron_db(&self) -> PathBuf {
        self.data_dir().join("cron").join("jobs.db")
    }
    /// The channels' inbox, outbox and senders (issue 38).
    pub fn channels_db(&self) -> PathBuf {
        self.data_dir().join("channels").join("channels.db")
    }
    pub fn sop_runs_db(&self) -> PathBuf {
        self.data_dir().join("sop").join("runs.db")
    }
    pub fn control_plane_db(&self) -> PathBuf {
        self.data_dir().join("control_plane.db")
    }
    pub fn state_dir(&self) -> PathBuf {
        self.data_dir().join("state")
    }
    /// `data/agents/_deleted/`: agent deletion archives (LIFE-4).
    pub fn deleted_agents_dir(&self) -> PathBuf {
        self.data_dir().join("agents").join("_deleted")
    }
    /// `data/state/lifecycle/`: journal of agent rename/delete/restore (BEYOND-3).
    pub fn lifecycle_journal_dir(&self) -> PathBuf {
        self.state_dir().join("lifecycle")
    }
    pub fn runtime_trace(&self) -> PathBuf {
        self.state_dir().join("runtime-trace.jsonl")
    }
    pub fn costs_ledger(&self) -> PathBuf {
        self.state_dir().join("costs.jsonl")
    }
    /// Line history of the interactive `warren agent` REPL (0600).
    pub fn repl_history(&self) -> PathBuf {
        self.state_dir().join("repl-history")
    }
    pub fn devices_db(&self) -> PathBuf {
        self.data_dir().join("devices.db")
    }
    /// Where the running gateway publishes its address and the local admin key (0600) for
    /// `warren pair` and `warren tokens` (STATE-15); removed when the gateway stops.
    pub fn gateway_admin(&self) -> PathBuf {
        self.data_dir().join("gateway.json")
    }
    /// The key of the daemon's control socket `data/daemon.sock` (0600, issue 35 §1): `warren
    /// acp` proves with it that it runs outside every agent sandbox (no sandbox exposes `data/`).
    pub fn daemon_socket_key(&self) -> PathBuf {
        self.data_dir().join("daemon.key")
    }
    pub fn memory_dir(&self) -> PathBuf {
        self.data_dir().join("memory")
    }
    /// The lock every process of the install holds across a Qdrant memory write's
    /// read-check-write (compare-and-set on the key's version).
    pub fn qdrant_lock(&self) -> PathBuf {
        self.memory_dir().join("qdrant.lock")
    }
    /// The install-wide SQLite memory store (MEM-2), shared by every agent on that backend.
    pub fn memory_db(&self) -> PathBuf {
        self.memory_dir().join("memory.db")
    }
    /// The daemon's exclusive lock (LAYOUT-4).
    pub fn daemon_lock(&self) -> PathBuf {
        self.data_dir().join("daemon.lock")
    }
    /// The running daemon's published state (pid, config generation); advisory only, the lock
    /// decides whether a daemon runs.
    pub fn daemon_state(&self) -> PathBuf {
        self.data_dir().join("daemon.json")
    }
    /// Cross-process config write lock (CFG-3): CLI writers and the daemon serialise on it.
    pub fn config_lock(&self) -> PathBuf {
        self.data_dir().join("config.lock")
    }

    // ---- shared/ and agents/ ------------------------------------------------------------
    pub fn shared_dir(&self) -> PathBuf {
        self.root.join("shared")
    }
    pub fn skills_dir(&self) -> PathBuf {
        self.shared_dir().join("skills")
    }
    pub fn agents_dir(&self) -> PathBuf {
        self.root.join("agents")
    }
    pub fn agent_dir(&self, alias: &AgentAlias) -> PathBuf {
        self.agents_dir().join(alias.as_str())
    }
    /// The bundled demo conversation `warren init` writes for the `script` provider.
    pub fn demo_script(&self) -> PathBuf {
        self.root.join("demo").join("demo-script.json")
    }
    /// `<install>/agents/<alias>/workspace/` (PERM-1); created lazily by the agent, not here.
    pub fn agent_workspace(&self, alias: &AgentAlias) -> PathBuf {
        self.agent_dir(alias).join("workspace")
    }
    /// The pre-agents `<install>/workspace/` (LAYOUT-2), only read to migrate it.
    pub fn legacy_workspace(&self) -> PathBuf {
        self.root.join("workspace")
    }

    /// Creates `<install>` (mode 0700), `data/`, `shared/` and `agents/` if missing.
    pub fn ensure_layout(&self) -> Result<(), PathError> {
        if self.root.exists() && !self.root.is_dir() {
            return Err(PathError::NotADirectory {
                path: self.root.clone(),
            });
        }
        let prepare = |path: PathBuf| {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&path)
                .map_err(|cause| PathError::Prepare { path, cause })
        };
        prepare(self.root.clone())?;
        prepare(self.data_dir())?;
        prepare(self.shared_dir())?;
        prepare(self.agents_dir())?;
        // Probe writability now, so an unwritable root is reported by name before any work.
        let probe = self
            .data_dir()
            .join(format!(".write-probe-{}", std::process::id()));
        fs::write(&probe, b"")
            .and_then(|()| fs::remove_file(&probe))
            .map_err(|cause| PathError::Prepare {
                path: self.root.clone(),
                cause,
            })?;
        Ok(())
    }

    /// LAYOUT-2: moves a legacy `<install>/workspace/` into `target`'s workspace, once.
    ///
    /// Returns what happened so the caller can log it. The move is a single `rename` on the
    /// same filesystem; if the target workspace already has content, nothing is moved and the
    /// caller is told to merge by hand (data is never merged or overwritten silently).
    pub fn migrate_legacy_workspace(
        &self,
        target: Option<&AgentAlias>,
    ) -> Result<LegacyMigration, PathError> {
        let legacy = self.legacy_workspace();
        match fs::symlink_metadata(&legacy) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Ok(LegacyMigration::NothingToDo);
            }
            Err(cause) => {
                return Err(PathError::Prepare {
                    path: legacy,
                    cause,
                });
            }
            Ok(meta) if !meta.is_dir() => {
                return Ok(LegacyMigration::Skipped {
                    reason: format!("{} is not a directory; left in place", legacy.display()),
                });
            }
            Ok(_) => {}
        }
        let Some(alias) = target else {
            return Ok(LegacyMigration::Skipped {
                reason: format!(
                    "{} exists but no default agent is configured (set [runtime] default_agent); left in place",
                    legacy.display()
                ),
            });
        };
        let dest = self.agent_workspace(alias);
        let dest_has_content = match fs::read_dir(&dest) {
            Ok(mut entries) => entries.next().is_some(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => false,
            Err(cause) => return Err(PathError::Prepare { path: dest, cause }),
        };
        if dest_has_content {
            return Ok(LegacyMigration::Skipped {
                reason: format!(
                    "{} exists but {} already has content; merge them by hand, then remove {}",
                    legacy.display(),
                    dest.display(),
                    legacy.display()
                ),
            });
        }
        let parent = self.agent_dir(alias);
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&parent)
            .map_err(|cause| PathError::Prepare {
                path: parent.clone(),
                cause,
            })?;
        if dest.exists() {
            // An empty directory: replace it by the legacy tree.
            fs::remove_dir(&dest).map_err(|cause| PathError::Prepare {
                path: dest.clone(),
                cause,
            })?;
        }
        fs::rename(&legacy, &dest).map_err(|cause| PathError::Prepare {
            path: legacy.clone(),
            cause,
        })?;
        crate::atomic::sync_dir(self.root()).ok();
        crate::atomic::sync_dir(&parent).ok();
        Ok(LegacyMigration::Moved {
            from: legacy,
            to: dest,
        })
    }

    /// Whether `path` is readable by others (used to warn about a world-readable config).
    pub fn is_group_or_world_readable(path: &Path) -> bool {
        fs::metadata(path)
            .map(|m| m.permissions().mode() & 0o044 != 0)
            .unwrap_or(false)
    }
}

/// Outcome of [`InstallRoot::migrate_legacy_workspace`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LegacyMigration {
    NothingToDo,
    Moved { from: PathBuf, to: PathBuf },
    Skipped { reason: String },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolution_order_flag_then_env_then_home() {
        let flag = Path::new("/a/flag");
        let env = Some(OsString::from("/b/env"));
        let home = Some(PathBuf::from("/c/home"));
        assert_eq!(
            InstallRoot::resolve(Some(flag), env.clone(), home.clone())
                .ok()
                .map(|r| r.root),
            Some(PathBuf::from("/a/flag"))
        );
        assert_eq!(
            InstallRoot::resolve(None, env, home.clone())
                .ok()
                .map(|r| r.root),
            Some(PathBuf::from("/b/env"))
        );
        assert_eq!(
            InstallRoot::resolve(None, None, home).ok().map(|r| r.root),
            Some(PathBuf::from("/c/home/.warren"))
        );
        assert!(matches!(
            InstallRoot::resolve(None, None, None),
            Err(PathError::NoHome)
        ));
        assert!(matches!(
            InstallRoot::resolve(Some(Path::new("")), None, None),
            Err(PathError::EmptyConfigDir)
        ));
        assert!(matches!(
            InstallRoot::resolve(None, Some(OsString::new()), None),
            Err(PathError::EmptyHomeEnv)
        ));
    }

    #[test]
    fn layout_paths_match_layout_1() {
        let r = InstallRoot::at("/w");
        let main = AgentAlias::new("main").ok();
        assert_eq!(
            r.sessions_db(),
            PathBuf::from("/w/data/sessions/sessions.db")
        );
        assert_eq!(
            r.acp_sessions_db(),
            PathBuf::from("/w/data/sessions/acp-sessions.db")
        );
        assert_eq!(r.cron_db(), PathBuf::from("/w/data/cron/jobs.db"));
        assert_eq!(r.sop_runs_db(), PathBuf::from("/w/data/sop/runs.db"));
        assert_eq!(
            r.control_plane_db(),
            PathBuf::from("/w/data/control_plane.db")
        );
        assert_eq!(
            r.runtime_trace(),
            PathBuf::from("/w/data/state/runtime-trace.jsonl")
        );
        assert_eq!(r.costs_ledger(), PathBuf::from("/w/data/state/costs.jsonl"));
        assert_eq!(r.devices_db(), PathBuf::from("/w/data/devices.db"));
        assert_eq!(r.memory_db(), PathBuf::from("/w/data/memory/memory.db"));
        assert_eq!(r.skills_dir(), PathBuf::from("/w/shared/skills"));
        assert_eq!(
            main.map(|a| r.agent_workspace(&a)),
            Some(PathBuf::from("/w/agents/main/workspace"))
        );
    }

    #[test]
    fn legacy_workspace_moves_once_and_never_merges() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let root = InstallRoot::at(dir.path());
        root.ensure_layout()?;
        let main = AgentAlias::new("main")?;
        fs::create_dir_all(root.legacy_workspace().join("notes"))?;
        fs::write(root.legacy_workspace().join("notes/a.md"), "hello")?;
        let moved = root.migrate_legacy_workspace(Some(&main))?;
        assert!(matches!(moved, LegacyMigration::Moved { .. }));
        assert_eq!(
            fs::read_to_string(root.agent_workspace(&main).join("notes/a.md"))?,
            "hello"
        );
        assert!(!root.legacy_workspace().exists());
        assert_eq!(
            root.migrate_legacy_workspace(Some(&main))?,
            LegacyMigration::NothingToDo
        );

        // A second legacy tree with a populated target is left alone.
        fs::create_dir_all(root.legacy_workspace())?;
        fs::write(root.legacy_workspace().join("b.md"), "other")?;
        assert!(matches!(
            root.migrate_legacy_workspace(Some(&main))?,
            LegacyMigration::Skipped { .. }
        ));
        assert_eq!(
            fs::read_to_string(root.legacy_workspace().join("b.md"))?,
            "other"
        );
        Ok(())
    }
}
