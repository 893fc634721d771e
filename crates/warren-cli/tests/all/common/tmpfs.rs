//! A real small tmpfs for full-disk and read-only tests (the suites run as root and may mount).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A tmpfs of a given size mounted at a path (mode 0700), unmounted (lazily) when dropped.
pub struct Tmpfs(PathBuf);

impl Tmpfs {
    /// Mounts a tmpfs of `size` (`mount -o size=`: "2m", "400k") at `at`, creating it.
    pub fn mount(at: &Path, size: &str) -> std::io::Result<Self> {
        fs::create_dir_all(at)?;
        let status = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(at)
            .status()?;
        if !status.success() {
            return Err(std::io::Error::other(format!(
                "mount -t tmpfs at {} failed ({status}); these tests run as root",
                at.display()
            )));
        }
        Ok(Self(at.to_path_buf()))
    }

    /// Fills the file system with the file `name` until a write fails with ENOSPC.
    pub fn fill(&self, name: &str) -> std::io::Result<PathBuf> {
        use std::io::Write;
        let path = self.0.join(name);
        let mut file = fs::File::create(&path)?;
        let chunk = vec![0u8; 4096];
        loop {
            match file.write_all(&chunk) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => return Ok(path),
                Err(e) => return Err(e),
            }
        }
    }

    /// Remounts it read-only; whether that worked.
    pub fn remount_read_only(&self) -> bool {
        Command::new("mount")
            .args(["-o", "remount,ro"])
            .arg(&self.0)
            .status()
            .is_ok_and(|s| s.success())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}
