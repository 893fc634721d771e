//! The full level's new root: the daemon lists its steps ([`RootBuilder`]: binds of exactly the
//! allowed paths, a private `/proc`, `/dev` and `/tmp`) and the launcher runs them in the child
//! ([`build_root`]) before `pivot_root` into it.

use std::ffi::{CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::{check, last_error, last_error_at};

/// One step of building the new root (paths already prefixed with `/oldroot` or `/newroot`).
#[derive(Debug)]
enum Step {
    Dir(CString),
    File(CString),
    Bind {
        src: CString,
        dst: CString,
        read_only: bool,
    },
    Symlink {
        target: CString,
        link: CString,
    },
    Tmpfs(CString),
    Proc(CString),
}

pub(super) fn cstr(p: impl AsRef<Path>) -> CString {
    // Paths with NUL bytes cannot exist; an empty string makes the step fail cleanly.
    CString::new(p.as_ref().as_os_str().as_bytes()).unwrap_or_default()
}

/// Builds the new root's steps.
#[derive(Debug)]
pub(crate) struct RootBuilder {
    steps: Vec<Step>,
    dirs: std::collections::BTreeSet<PathBuf>,
}

impl RootBuilder {
    pub(crate) fn new() -> Self {
        Self {
            steps: Vec::new(),
            dirs: std::collections::BTreeSet::new(),
        }
    }

    fn new_path(p: &Path) -> PathBuf {
        Path::new("/newroot").join(p.strip_prefix("/").unwrap_or(p))
    }

    fn old_path(p: &Path) -> PathBuf {
        Path::new("/oldroot").join(p.strip_prefix("/").unwrap_or(p))
    }

    /// Creates `p` (inside the new root) and its missing parents, 0755.
    pub(crate) fn dir(&mut self, p: &Path) {
        let mut todo: Vec<&Path> = p
            .ancestors()
            .filter(|a| a.parent().is_some() && !self.dirs.contains(*a))
            .collect();
        todo.reverse();
        for a in todo {
            self.dirs.insert(a.to_path_buf());
            self.steps.push(Step::Dir(cstr(Self::new_path(a))));
        }
    }

    /// Binds host `src` at the same path, when it exists (`symlink_metadata`: a link is bound as
    /// the file or directory it names, like `mount --bind`).
    pub(crate) fn bind(&mut self, src: &Path, read_only: bool) {
        self.bind_at(src, src, read_only);
    }

    pub(crate) fn bind_at(&mut self, src: &Path, dst: &Path, read_only: bool) {
        // Resolved here: inside the child an absolute link target would resolve against the
        // staging root, not the host's (`/etc/localtime` -> `/usr/share/zoneinfo/...`).
        let Ok(src) = std::fs::canonicalize(src) else {
            return;
        };
        let Ok(meta) = std::fs::metadata(&src) else {
            return;
        };
        let src = src.as_path();
        if meta.is_dir() {
            self.dir(dst);
        } else {
            if let Some(parent) = dst.parent() {
                self.dir(parent);
            }
            self.steps.push(Step::File(cstr(Self::new_path(dst))));
        }
        self.steps.push(Step::Bind {
            src: cstr(Self::old_path(src)),
            dst: cstr(Self::new_path(dst)),
            read_only,
        });
    }

    pub(crate) fn symlink(&mut self, target: &Path, link: &Path) {
        if let Some(parent) = link.parent() {
            self.dir(parent);
        }
        self.steps.push(Step::Symlink {
            target: cstr(target),
            link: cstr(Self::new_path(link)),
        });
    }

    /// `/usr` read-only and the `/bin`, `/sbin`, `/lib*` links (or directories) beside it.
    pub(crate) fn system(&mut self) {
        self.bind(Path::new("/usr"), true);
        for dir in ["/bin", "/sbin", "/lib", "/lib64", "/lib32"] {
            let path = Path::new(dir);
            match std::fs::read_link(path) {
                Ok(target) => self.symlink(&target, path),
                Err(_) if path.is_dir() => self.bind(path, true),
                Err(_) => {}
            }
        }
    }

    pub(crate) fn tmpfs(&mut self, p: &Path) {
        self.dir(p);
        self.steps.push(Step::Tmpfs(cstr(Self::new_path(p))));
    }

    pub(crate) fn proc(&mut self, p: &Path) {
        self.dir(p);
        self.steps.push(Step::Proc(cstr(Self::new_path(p))));
    }
}

/// Builds the new root from `root`'s steps, pivots into it and enters `chdir`.
pub(super) unsafe fn build_root(root: &RootBuilder, chdir: &CStr) -> std::io::Result<()> {
    // SAFETY: see the module docs; every pointer is a prepared C string.
    unsafe {
        let null = std::ptr::null::<libc::c_char>();
        check(
            libc::mount(
                null,
                c"/".as_ptr(),
                null,
                libc::MS_REC | libc::MS_PRIVATE,
                null.cast(),
            ),
            c"make / private",
        )?;
        // A tmpfs on /tmp becomes the root that holds /newroot and /oldroot.
        check(
            libc::mount(
                c"tmpfs".as_ptr(),
                c"/tmp".as_ptr(),
                c"tmpfs".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                c"mode=0755".as_ptr().cast(),
            ),
            c"tmpfs for the new root",
        )?;
        for dir in [c"/tmp/newroot", c"/tmp/oldroot"] {
            check(libc::mkdir(dir.as_ptr(), 0o755), c"mkdir")?;
        }
        check(
            libc::mount(
                c"/tmp/newroot".as_ptr(),
                c"/tmp/newroot".as_ptr(),
                null,
                libc::MS_BIND | libc::MS_REC,
                null.cast(),
            ),
            c"bind the new root",
        )?;
        check(
            libc::syscall(
                libc::SYS_pivot_root,
                c"/tmp".as_ptr(),
                c"/tmp/oldroot".as_ptr(),
            ) as libc::c_int,
            c"pivot_root",
        )?;
        check(libc::chdir(c"/".as_ptr()), c"chdir /")?;
        for step in &root.steps {
            run_step(step)?;
        }
        check(libc::chdir(c"/newroot".as_ptr()), c"chdir /newroot")?;
        check(
            libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()) as libc::c_int,
            c"pivot_root into the new root",
        )?;
        check(
            libc::umount2(c".".as_ptr(), libc::MNT_DETACH),
            c"detach the old root",
        )?;
        check(libc::chdir(chdir.as_ptr()), c"chdir to the workspace")?;
    }
    Ok(())
}

unsafe fn run_step(step: &Step) -> std::io::Result<()> {
    // SAFETY: see the module docs.
    unsafe {
        let null = std::ptr::null::<libc::c_char>();
        match step {
            Step::Dir(p) => {
                if libc::mkdir(p.as_ptr(), 0o755) < 0 && *libc::__errno_location() != libc::EEXIST {
                    return Err(last_error(c"mkdir"));
                }
                // Mount points must be walkable by the sandbox user whatever the umask.
                check(libc::chmod(p.as_ptr(), 0o755), c"chmod")?;
            }
            Step::File(p) => {
                let fd = libc::open(
                    p.as_ptr(),
                    libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
                    0o644,
                );
                check(fd, c"create a mount point")?;
                libc::close(fd);
            }
            Step::Bind {
                src,
                dst,
                read_only,
            } => {
                if libc::mount(
                    src.as_ptr(),
                    dst.as_ptr(),
                    null,
                    libc::MS_BIND | libc::MS_REC,
                    null.cast(),
                ) < 0
                {
                    return Err(last_error_at(c"bind", src));
                }
                if *read_only {
                    // Keep the flags the kernel locks on the source (nosuid, nodev, noexec, atime).
                    let mut vfs: libc::statvfs = std::mem::zeroed();
                    check(libc::statvfs(dst.as_ptr(), &mut vfs), c"statvfs")?;
                    let keep = vfs.f_flag
                        & (libc::ST_NOSUID
                            | libc::ST_NODEV
                            | libc::ST_NOEXEC
                            | libc::ST_NOATIME
                            | libc::ST_NODIRATIME
                            | libc::ST_RELATIME);
                    check(
                        libc::mount(
                            null,
                            dst.as_ptr(),
                            null,
                            libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | keep,
                            null.cast(),
                        ),
                        c"remount read-only",
                    )?;
                }
            }
            Step::Symlink { target, link } => {
                check(libc::symlink(target.as_ptr(), link.as_ptr()), c"symlink")?;
            }
            Step::Tmpfs(p) => {
                check(
                    libc::mount(
                        c"tmpfs".as_ptr(),
                        p.as_ptr(),
                        c"tmpfs".as_ptr(),
                        libc::MS_NOSUID | libc::MS_NODEV,
                        c"mode=0755".as_ptr().cast(),
                    ),
                    c"tmpfs",
                )?;
            }
            Step::Proc(p) => {
                check(
                    libc::mount(
                        c"proc".as_ptr(),
                        p.as_ptr(),
                        c"proc".as_ptr(),
                        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                        null.cast(),
                    ),
                    c"mount /proc",
                )?;
            }
        }
    }
    Ok(())
}
