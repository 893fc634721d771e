//! The write-only watch probe of `warren security selftest` (issue 35 §6): a `Write` grant lets
//! the agent create and overwrite files in a sibling's workspace, never learn what is there. A
//! watch needs no Landlock right, so `inotify_add_watch` on the sibling's directory streamed its
//! file names and activity. The child sets the watch and says so; the judge then creates a file
//! there (through a confined handle), and the probe escapes if the child names it.

use std::io::{BufRead, BufReader, Read};
use std::time::{Duration, Instant};

use super::Sandbox;
use super::selftest::{Outcome, Probe, ProbeSpec, Unprobed, succeeded};
use super::selftest_stage::Refused;
use crate::confined_dir::ConfinedDir;

/// The file the judge creates in the `Write` grant once the child watches.
const WATCHED: &str = ".warren-selftest-watched";

pub(super) fn judge(sandbox: &Sandbox) -> Result<(Outcome, String), Unprobed> {
    let Some(grant) = sandbox.policy().write_only_roots().first() else {
        return Ok((Outcome::Skipped, "the agent has no Write grant".into()));
    };
    let dir = ConfinedDir::open_root(&grant.root)?.ok_or(Unprobed::Missing("the Write grant"))?;
    let _ = dir.remove(WATCHED);
    let spec = ProbeSpec {
        probe: Probe::WriteOnlyTierWatch,
        target: grant.root.display().to_string(),
    };
    let mut child = sandbox.spawn_probe_child(&spec)?;
    let stdout = child.stdout.take();
    let mut out = BufReader::new(stdout.ok_or(Unprobed::Missing("the probe's stdout"))?);
    let mut first = String::new();
    let _ = out.read_line(&mut first);
    if first.trim() == "watching" {
        // The sibling's activity the watch would report.
        let _ = dir.write_atomic(WATCHED, b"x");
    }
    let mut rest = String::new();
    let _ = out.read_to_string(&mut rest);
    let _ = child.wait();
    let _ = dir.remove(WATCHED);
    let line = if first.trim() == "watching" {
        rest.trim().to_string()
    } else {
        first.trim().to_string()
    };
    let escaped = succeeded(&line) && (line.contains(WATCHED) || line.contains("fanotify"));
    Ok((
        if escaped {
            Outcome::Escape
        } else {
            Outcome::Held
        },
        line,
    ))
}

/// Inside the sandbox: fanotify, then an inotify watch on the grant, reporting the names it sees.
pub(super) fn attempt(target: &str) -> Result<String, Refused> {
    use rustix::fs::inotify;
    let fanotify = super::probe_sys::fanotify_init();
    let fd = match inotify::init(inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK) {
        Ok(fd) => fd,
        Err(e) => {
            return match fanotify {
                Ok(()) => Ok(format!(
                    "created a fanotify group (its marks report a directory's activity); inotify_init1: {e}"
                )),
                Err(f) => Err(Refused(format!("inotify_init1: {e}; fanotify_init: {f}"))),
            };
        }
    };
    inotify::add_watch(&fd, target, inotify::WatchFlags::ALL_EVENTS)
        .map_err(|e| Refused(format!("inotify_add_watch {target}: {e}")))?;
    println!("watching");
    let _ = std::io::Write::flush(&mut std::io::stdout());
    let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 4096];
    let mut names = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(3);
    while names.is_empty() && Instant::now() < deadline {
        let mut reader = inotify::Reader::new(&fd, &mut buf);
        while let Ok(event) = reader.next() {
            if let Some(name) = event.file_name() {
                names.push(name.to_string_lossy().into_owned());
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    if names.is_empty() {
        Err("the watch saw nothing".into())
    } else {
        names.dedup();
        Ok(format!(
            "watched the Write grant and saw {}",
            names.join(", ")
        ))
    }
}
