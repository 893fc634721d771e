//! What this host offers the sandbox, probed once per process (Landlock, seccomp, the full
//! level's namespaces, the stage executable), and the one thread that spawns every confined
//! child.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock, mpsc};

use super::{CHILD_PATH, PrepareError, landlock_abi, launch, seccomp, stage};

pub(crate) fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// The executable that runs selftest probes: this process's own binary.
pub(super) fn stage_exe() -> Result<&'static Path, Arc<PrepareError>> {
    static EXE: OnceLock<Result<PathBuf, Arc<PrepareError>>> = OnceLock::new();
    EXE.get_or_init(|| {
        if !stage::linked() {
            return Err(Arc::new(PrepareError::StageNotLinked));
        }
        std::env::current_exe().map_err(|e| Arc::new(PrepareError::CurrentExe(e)))
    })
    .as_ref()
    .map(PathBuf::as_path)
    .map_err(Arc::clone)
}

/// Whether this kernel can enforce the landlock level (probed once).
pub(super) fn stage_status() -> Result<(), Arc<PrepareError>> {
    static STATUS: OnceLock<Result<(), Arc<PrepareError>>> = OnceLock::new();
    STATUS
        .get_or_init(|| {
            if landlock_abi().is_none() {
                return Err(Arc::new(PrepareError::NoLandlock));
            }
            seccomp::packed(false, seccomp::Watches::Denied)
                .map(|_| ())
                .map_err(|e| Arc::new(e.into()))
        })
        .clone()
}

/// Whether this kernel lets the launcher build the full level's namespaces (probed once, by
/// starting `/bin/true` in a minimal root).
pub(super) fn full_status() -> Result<(), Arc<PrepareError>> {
    static STATUS: OnceLock<Result<(), Arc<PrepareError>>> = OnceLock::new();
    STATUS
        .get_or_init(|| {
            let mut root = launch::RootBuilder::new();
            root.system();
            root.proc(Path::new("/proc"));
            let mut cmd = Command::new("/bin/true");
            cmd.env_clear()
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped());
            launch::Plan::full(Arc::new(root), true, true, Path::new("/")).install(&mut cmd);
            let out = spawner()
                .spawn(cmd)
                .map_err(Arc::new)?
                .and_then(Child::wait_with_output)
                .map_err(|e| Arc::new(PrepareError::NamespacesSpawn(e)))?;
            if out.status.success() {
                Ok(())
            } else {
                Err(Arc::new(PrepareError::Namespaces {
                    stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
                }))
            }
        })
        .clone()
}

/// A long-lived thread that spawns every confined child, so the parent-death signal (which
/// follows the spawning thread, not the process) never fires because a pool thread retired.
pub(super) struct Spawner {
    requests: Mutex<mpsc::Sender<(Command, mpsc::SyncSender<std::io::Result<Child>>)>>,
}

impl Spawner {
    pub(super) fn spawn(&self, cmd: Command) -> Result<std::io::Result<Child>, PrepareError> {
        let (reply, answer) = mpsc::sync_channel(1);
        self.requests
            .lock()
            .map_err(|_| PrepareError::SpawnerPoisoned)?
            .send((cmd, reply))
            .map_err(|_| PrepareError::SpawnerStopped)?;
        answer.recv().map_err(|_| PrepareError::SpawnerStopped)
    }
}

pub(super) fn spawner() -> &'static Spawner {
    static SPAWNER: OnceLock<Spawner> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (requests, inbox) =
            mpsc::channel::<(Command, mpsc::SyncSender<std::io::Result<Child>>)>();
        let started = std::thread::Builder::new()
            .name("warren-sandbox-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in inbox {
                    let _ = reply.send(cmd.spawn());
                }
            });
        if let Err(e) = started {
            tracing::error!("cannot start the sandbox spawner thread: {e}");
        }
        Spawner {
            requests: Mutex::new(requests),
        }
    })
}

pub(crate) fn which(program: &str) -> Option<PathBuf> {
    CHILD_PATH
        .split(':')
        .chain(["/usr/sbin", "/sbin"])
        .map(|dir| PathBuf::from(dir).join(program))
        .find(|p| p.is_file())
}
