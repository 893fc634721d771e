//! Confined handles on directories an agent can write: the daemon's only way into an agent's
//! workspace and what lies below it (PERM-6; issue 13: identity files, Markdown memory and its
//! lock, and every later daemon-side reader or writer of agent-writable places).
//!
//! A [`ConfinedDir`] is opened once on a directory the daemon owns the entry of (an agent's
//! workspace, as `InstallRoot` lays it out; a link the operator made there is followed, as the
//! path decisions do for allowed roots). Everything below it is reached only through that
//! handle: `openat2(dir, name, .., RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
//! RESOLVE_NO_MAGICLINKS)` with `O_NOFOLLOW`, one plain file name at a time, so a symbolic link
//! the agent planted — before the call or racing it — is refused by the kernel (`ELOOP`) instead
//! of followed out of the directory. Reads also refuse what is not a regular file or has more
//! than one hard link (checked on the open descriptor). Writes are atomic under a random temp
//! name created `O_EXCL | O_NOFOLLOW` (no name an agent could plant a link at in advance), then
//! fsync, `renameat` over the target and fsync of the directory. Lock files are opened the same
//! way and locked with `flock`.
//!
//! [`open_subdir`] and [`write_replacing`] are the shared steps: `warren_security::confined`
//! (the file tools) uses them too, so there is one copy of the atomic write.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, FileType, FlockOperation, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

/// How every name below a confined directory is resolved.
pub const RESOLVE: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS);

/// Mode of directories created below a confined directory.
const DIR_MODE: u32 = 0o755;
/// Mode of files created below a confined directory (an existing file keeps its own).
const FILE_MODE: u32 = 0o644;

/// Why a confined operation failed, and on which path.
#[derive(Debug, thiserror::Error)]
#[error("{}: {kind}", path.display())]
pub struct DirError {
    pub path: PathBuf,
    pub kind: DirErrorKind,
}

/// What went wrong (without the path; [`DirError`] carries it).
#[derive(Debug, thiserror::Error)]
pub enum DirErrorKind {
    #[error(
        "is a symbolic link (or one is on its path); Warren does not follow links in an agent's directory"
    )]
    Symlink,
    #[error(
        "has {links} hard links; Warren reads only files with a single link in an agent's directory (copy the file instead of linking it)"
    )]
    HardLinked { links: u64 },
    #[error("is not a regular file")]
    NotAFile,
    #[error("is not a directory")]
    NotADirectory,
    #[error("is larger than the {limit}-byte limit")]
    TooLarge { limit: u64 },
    #[error("is not a plain name inside the directory")]
    BadName,
    #[error("{0}")]
    Io(io::Error),
}

impl DirErrorKind {
    /// The refusal as an `io::Error` (for callers whose errors carry one).
    pub fn into_io(self) -> io::Error {
        let kind = match &self {
            Self::Io(_) => io::ErrorKind::Other,
            Self::Symlink | Self::HardLinked { .. } => io::ErrorKind::PermissionDenied,
            Self::NotADirectory => io::ErrorKind::NotADirectory,
            Self::TooLarge { .. } => io::ErrorKind::FileTooLarge,
            Self::NotAFile | Self::BadName => io::ErrorKind::InvalidInput,
        };
        match self {
            Self::Io(e) => e,
            other => io::Error::new(kind, other.to_string()),
        }
    }

    fn from_errno(e: Errno) -> Self {
        match e {
            // ELOOP: a link met under RESOLVE_NO_SYMLINKS or O_NOFOLLOW; EXDEV: an escape.
            Errno::LOOP | Errno::XDEV => Self::Symlink,
            Errno::NOTDIR => Self::NotADirectory,
            // Opening a socket fails with ENXIO; `write_replacing` reports other kinds the same way.
            Errno::NXIO => Self::NotAFile,
            other => Self::Io(other.into()),
        }
    }
}

impl DirError {
    fn new(path: PathBuf, kind: DirErrorKind) -> Self {
        Self { path, kind }
    }
}

/// What kind of directory entry a name is (links are never followed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    File,
    Dir,
    Symlink,
    Other,
}

impl FileKind {
    fn of(t: FileType) -> Self {
        match t {
            FileType::RegularFile => Self::File,
            FileType::Directory => Self::Dir,
            FileType::Symlink => Self::Symlink,
            _ => Self::Other,
        }
    }
}

/// What `lstat` says of a name: enough to tell whether a file changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileMeta {
    pub kind: FileKind,
    pub len: u64,
    pub ino: u64,
    pub links: u64,
    pub mtime: (i64, i64),
    pub ctime: (i64, i64),
}

impl FileMeta {
    // `st_nlink` is a u64 on some targets and a u32 on others.
    #[allow(clippy::useless_conversion)]
    fn of(st: &rustix::fs::Stat) -> Self {
        Self {
            kind: FileKind::of(FileType::from_raw_mode(st.st_mode)),
            len: u64::try_from(st.st_size).unwrap_or(0),
            ino: st.st_ino,
            links: u64::from(st.st_nlink),
            mtime: (st.st_mtime, i64::try_from(st.st_mtime_nsec).unwrap_or(0)),
            ctime: (st.st_ctime, i64::try_from(st.st_ctime_nsec).unwrap_or(0)),
        }
    }
}

/// A held `flock` on a lock file below a confined directory; released on drop.
#[derive(Debug)]
pub struct DirLock {
    _fd: OwnedFd,
}

/// A handle on a directory; every name below it is resolved beneath it without following links.
#[derive(Debug)]
pub struct ConfinedDir {
    fd: OwnedFd,
    path: PathBuf,
}

impl AsFd for ConfinedDir {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl ConfinedDir {
    /// Opens the directory at `path`, whose entry the daemon owns (e.g. an agent's workspace as
    /// `InstallRoot` lays it out); `None` when it does not exist.
    pub fn open_root(path: &Path) -> Result<Option<Self>, DirError> {
        match rustix::fs::open(
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => Ok(Some(Self {
                fd,
                path: path.to_path_buf(),
            })),
            Err(Errno::NOENT) => Ok(None),
            Err(e) => Err(DirError::new(
                path.to_path_buf(),
                DirErrorKind::from_errno(e),
            )),
        }
    }

    /// [`Self::open_root`], creating the directory (and its parents) first if missing.
    pub fn create_root(path: &Path) -> Result<Self, DirError> {
        std::fs::create_dir_all(path)
            .map_err(|e| DirError::new(path.to_path_buf(), DirErrorKind::Io(e)))?;
        Self::open_root(path)?.ok_or_else(|| {
            DirError::new(
                path.to_path_buf(),
                DirErrorKind::Io(io::ErrorKind::NotFound.into()),
            )
        })
    }

    /// The directory's path, for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Opens the directory `rel` (plain names only) below this one, one component at a time
    /// and creating missing ones when `create`; `None` when it does not exist and not `create`.
    pub fn open_dir(&self, rel: impl AsRef<Path>, create: bool) -> Result<Option<Self>, DirError> {
        let rel = rel.as_ref();
        let path = self.path.join(rel);
        let mut opened: Option<OwnedFd> = None;
        for comp in rel.components() {
            let Component::Normal(name) = comp else {
                return Err(DirError::new(path, DirErrorKind::BadName));
            };
            let parent = opened.as_ref().map_or(self.fd.as_fd(), AsFd::as_fd);
            match open_subdir(parent, name, create) {
                Ok(fd) => opened = Some(fd),
                Err(Errno::NOENT) => return Ok(None),
                Err(e) => return Err(DirError::new(path, DirErrorKind::from_errno(e))),
            }
        }
        match opened {
            Some(fd) => Ok(Some(Self { fd, path })),
            None => Err(DirError::new(path, DirErrorKind::BadName)),
        }
    }

    /// The whole file `name`, refused when it is over `limit` bytes; `None` when absent.
    pub fn read(&self, name: impl AsRef<OsStr>, limit: u64) -> Result<Option<Vec<u8>>, DirError> {
        self.read_capped(name.as_ref(), limit, false)
    }

    /// At most the first `max` bytes of the file `name`; `None` when absent.
    pub fn read_prefix(
        &self,
        name: impl AsRef<OsStr>,
        max: u64,
    ) -> Result<Option<Vec<u8>>, DirError> {
        self.read_capped(name.as_ref(), max, true)
    }

    /// [`Self::read`] as UTF-8 text.
    pub fn read_to_string(
        &self,
        name: impl AsRef<OsStr>,
        limit: u64,
    ) -> Result<Option<String>, DirError> {
        let name = name.as_ref();
        match self.read(name, limit)? {
            None => Ok(None),
            Some(bytes) => String::from_utf8(bytes).map(Some).map_err(|_| {
                DirError::new(
                    self.path.join(name),
                    DirErrorKind::Io(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "is not UTF-8 text",
                    )),
                )
            }),
        }
    }

    fn read_capped(
        &self,
        name: &OsStr,
        limit: u64,
        truncate: bool,
    ) -> Result<Option<Vec<u8>>, DirError> {
        let path = self.path.join(name);
        let err = |kind| DirError::new(self.path.join(name), kind);
        let name = leaf(name).ok_or_else(|| err(DirErrorKind::BadName))?;
        let fd = match rustix::fs::openat2(
            &self.fd,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK,
            Mode::empty(),
            RESOLVE,
        ) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(e) => return Err(err(DirErrorKind::from_errno(e))),
        };
        let meta = single_file(&fd).map_err(err)?;
        if meta.len > limit && !truncate {
            return Err(err(DirErrorKind::TooLarge { limit }));
        }
        let mut bytes = Vec::with_capacity(usize::try_from(meta.len.min(limit)).unwrap_or(0));
        File::from(fd)
            .take(limit.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(|e| DirError::new(path, DirErrorKind::Io(e)))?;
        if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > limit {
            if !truncate {
                // It grew past the limit while being read.
                return Err(err(DirErrorKind::TooLarge { limit }));
            }
            bytes.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
        }
        Ok(Some(bytes))
    }

    /// Opens the regular, single-link file `name` for streaming reads (a backup, issue 22),
    /// with its metadata; `None` when absent. Links are refused as by [`Self::read`].
    pub fn open_file(&self, name: impl AsRef<OsStr>) -> Result<Option<(File, FileMeta)>, DirError> {
        let name = name.as_ref();
        let err = |kind| DirError::new(self.path.join(name), kind);
        let name = leaf(name).ok_or_else(|| err(DirErrorKind::BadName))?;
        let fd = match rustix::fs::openat2(
            &self.fd,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK,
            Mode::empty(),
            RESOLVE,
        ) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(e) => return Err(err(DirErrorKind::from_errno(e))),
        };
        let meta = single_file(&fd).map_err(err)?;
        Ok(Some((File::from(fd), meta)))
    }

    /// The target of the symbolic link `name` (the link itself is never followed).
    pub fn read_link(&self, name: impl AsRef<OsStr>) -> Result<OsString, DirError> {
        let name = name.as_ref();
        let err = |kind| DirError::new(self.path.join(name), kind);
        let name = leaf(name).ok_or_else(|| err(DirErrorKind::BadName))?;
        rustix::fs::readlinkat(&self.fd, name, Vec::new())
            .map(|t| OsString::from_vec(t.into_bytes()))
            .map_err(|e| err(DirErrorKind::Io(e.into())))
    }

    /// Replaces (or creates) the file `name` with `bytes` atomically (see the module docs). A
    /// symbolic link or anything but a regular file at `name` is refused; an existing file
    /// keeps its permission bits.
    pub fn write_atomic(&self, name: impl AsRef<OsStr>, bytes: &[u8]) -> Result<(), DirError> {
        let name = name.as_ref();
        write_replacing(&self.fd, name, bytes)
            .map_err(|e| DirError::new(self.path.join(name), DirErrorKind::from_errno(e)))
    }

    /// Opens (creating) the lock file `name` and takes an exclusive or shared `flock` on it,
    /// waiting for it. A link or a file with more than one hard link is refused.
    pub fn lock(&self, name: impl AsRef<OsStr>, exclusive: bool) -> Result<DirLock, DirError> {
        let name = name.as_ref();
        let err = |kind| DirError::new(self.path.join(name), kind);
        let name = leaf(name).ok_or_else(|| err(DirErrorKind::BadName))?;
        let fd = rustix::fs::openat2(
            &self.fd,
            name,
            OFlags::RDONLY | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
            Mode::from_raw_mode(FILE_MODE),
            RESOLVE,
        )
        .map_err(|e| err(DirErrorKind::from_errno(e)))?;
        single_file(&fd).map_err(err)?;
        let op = if exclusive {
            FlockOperation::LockExclusive
        } else {
            FlockOperation::LockShared
        };
        rustix::fs::flock(&fd, op).map_err(|e| err(DirErrorKind::Io(e.into())))?;
        Ok(DirLock { _fd: fd })
    }

    /// `lstat` of `name`; `None` when absent.
    pub fn stat(&self, name: impl AsRef<OsStr>) -> Result<Option<FileMeta>, DirError> {
        let name = name.as_ref();
        let err = |kind| DirError::new(self.path.join(name), kind);
        let name = leaf(name).ok_or_else(|| err(DirErrorKind::BadName))?;
        match rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(FileMeta::of(&st))),
            Err(Errno::NOENT) => Ok(None),
            Err(e) => Err(err(DirErrorKind::from_errno(e))),
        }
    }

    /// Removes the entry `name` (a link itself, never its target); `false` when absent.
    pub fn remove(&self, name: impl AsRef<OsStr>) -> Result<bool, DirError> {
        let name = name.as_ref();
        let err = |kind| DirError::new(self.path.join(name), kind);
        let name = leaf(name).ok_or_else(|| err(DirErrorKind::BadName))?;
        match rustix::fs::unlinkat(&self.fd, name, AtFlags::empty()) {
            Ok(()) => Ok(true),
            Err(Errno::NOENT) => Ok(false),
            Err(e) => Err(err(DirErrorKind::from_errno(e))),
        }
    }

    /// Moves the entry `name` to `to_name` in `to` (the entry itself: a link moves as a link);
    /// `false` when `name` is absent.
    pub fn rename(
        &self,
        name: impl AsRef<OsStr>,
        to: &ConfinedDir,
        to_name: impl AsRef<OsStr>,
    ) -> Result<bool, DirError> {
        let (name, to_name) = (name.as_ref(), to_name.as_ref());
        let err = |kind| DirError::new(self.path.join(name), kind);
        let (Some(from), Some(target)) = (leaf(name), leaf(to_name)) else {
            return Err(err(DirErrorKind::BadName));
        };
        match rustix::fs::renameat(&self.fd, from, &to.fd, target) {
            Ok(()) => Ok(true),
            Err(Errno::NOENT) => Ok(false),
            Err(e) => Err(err(DirErrorKind::from_errno(e))),
        }
    }

    /// The names in this directory (without `.` and `..`), each with its kind (links are not
    /// followed), in no particular order.
    pub fn entries(&self) -> Result<Vec<(OsString, FileKind)>, DirError> {
        let err = |e: Errno| DirError::new(self.path.clone(), DirErrorKind::from_errno(e));
        let dir = rustix::fs::Dir::read_from(&self.fd).map_err(err)?;
        let mut out = Vec::new();
        for entry in dir {
            let entry = entry.map_err(err)?;
            let name = OsStr::from_bytes(entry.file_name().to_bytes());
            if name == "." || name == ".." {
                continue;
            }
            let kind = match entry.file_type() {
                FileType::Unknown => match self.stat(name)? {
                    Some(meta) => meta.kind,
                    None => continue,
                },
                t => FileKind::of(t),
            };
            out.push((name.to_os_string(), kind));
        }
        Ok(out)
    }
}

/// `name` when it is one plain component (no `/`, not `.` or `..`, not empty).
/// The metadata of an opened file that is a regular file with exactly one link (another name of
/// a hard-linked file may lie outside the directory), or why it is not.
fn single_file(fd: &OwnedFd) -> Result<FileMeta, DirErrorKind> {
    let meta = rustix::fs::fstat(fd)
        .map(|st| FileMeta::of(&st))
        .map_err(DirErrorKind::from_errno)?;
    if meta.kind != FileKind::File {
        return Err(DirErrorKind::NotAFile);
    }
    if meta.links > 1 {
        return Err(DirErrorKind::HardLinked { links: meta.links });
    }
    Ok(meta)
}

fn leaf(name: &OsStr) -> Option<&OsStr> {
    let bytes = name.as_bytes();
    let plain = !bytes.is_empty() && !bytes.contains(&b'/') && name != "." && name != "..";
    plain.then_some(name)
}

/// Opens the directory `name` (one plain component) under `dir` without following a link,
/// creating it first when missing and `create`.
pub fn open_subdir(dir: impl AsFd, name: &OsStr, create: bool) -> rustix::io::Result<OwnedFd> {
    let name = leaf(name).ok_or(Errno::INVAL)?;
    let open = |dir: BorrowedFd<'_>| {
        rustix::fs::openat2(
            dir,
            name,
            // RESOLVE_NO_SYMLINKS covers the last component too (with ELOOP; O_NOFOLLOW would
            // turn a link into ENOTDIR under O_DIRECTORY).
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
            RESOLVE,
        )
    };
    match open(dir.as_fd()) {
        Err(Errno::NOENT) if create => {
            let made = match rustix::fs::mkdirat(&dir, name, Mode::from_raw_mode(DIR_MODE)) {
                Ok(()) => true,
                Err(Errno::EXIST) => false,
                Err(e) => return Err(e),
            };
            let fd = open(dir.as_fd())?;
            if made {
                take_dir_owner(dir.as_fd(), &fd)?;
            }
            Ok(fd)
        }
        other => other,
    }
}

/// A file or directory the daemon creates takes the owner of the directory it is created in.
/// Only matters when the daemon runs as root: workspaces then belong to the sandbox user
/// (`nobody`), and what the file tools or memory write there must stay the agent's to change.
fn take_dir_owner(dir: BorrowedFd<'_>, new: &impl AsFd) -> rustix::io::Result<()> {
    if !rustix::process::geteuid().is_root() {
        return Ok(());
    }
    let st = rustix::fs::fstat(dir)?;
    if st.st_uid == 0 && st.st_gid == 0 {
        return Ok(());
    }
    rustix::fs::fchown(
        new,
        Some(rustix::fs::Uid::from_raw(st.st_uid)),
        Some(rustix::fs::Gid::from_raw(st.st_gid)),
    )
}

/// Atomically replaces (or creates) the file `name` (one plain component) in `dir` with
/// `bytes`: random temp name created `O_EXCL | O_NOFOLLOW`, write, fsync, `renameat` over
/// `name`, fsync of `dir`; the temp file is removed on failure. A link at `name` fails with
/// `ELOOP`, anything else that is not a regular file with `ENXIO`; an existing file keeps its
/// permission bits.
pub fn write_replacing(dir: impl AsFd, name: &OsStr, bytes: &[u8]) -> rustix::io::Result<()> {
    let dir = dir.as_fd();
    let name = leaf(name).ok_or(Errno::INVAL)?;
    let mode = match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => match FileType::from_raw_mode(st.st_mode) {
            FileType::RegularFile => Mode::from_raw_mode(st.st_mode) & Mode::from_raw_mode(0o7777),
            FileType::Symlink => return Err(Errno::LOOP),
            _ => return Err(Errno::NXIO),
        },
        Err(Errno::NOENT) => Mode::from_raw_mode(FILE_MODE),
        Err(e) => return Err(e),
    };
    let temp = temp_name(name)?;
    let fd = rustix::fs::openat(
        dir,
        &temp,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        mode,
    )?;
    let errno = |e: io::Error| Errno::from_io_error(&e).unwrap_or(Errno::IO);
    let result = (|| {
        take_dir_owner(dir, &fd)?;
        let mut file = File::from(fd);
        file.write_all(bytes).map_err(errno)?;
        file.sync_all().map_err(errno)?;
        rustix::fs::renameat(dir, &temp, dir, name)?;
        rustix::fs::fsync(dir)
    })();
    if result.is_err() {
        let _ = rustix::fs::unlinkat(dir, &temp, AtFlags::empty());
    }
    result
}

/// `.<name>.warren-tmp-<64 random bits>`: no name an agent could plant a link at beforehand.
fn temp_name(name: &OsStr) -> rustix::io::Result<OsString> {
    let mut buf = [0u8; 8];
    getrandom::fill(&mut buf).map_err(|_| Errno::AGAIN)?;
    let mut temp = OsString::from(".");
    temp.push(name);
    temp.push(format!(".warren-tmp-{:016x}", u64::from_ne_bytes(buf)));
    Ok(temp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn setup() -> (tempfile::TempDir, ConfinedDir, PathBuf) {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let ws = tmp.path().join("ws");
        let dir = ConfinedDir::create_root(&ws).unwrap_or_else(|e| panic!("{e}"));
        let host = tmp.path().join("host.txt");
        std::fs::write(&host, "host secret").unwrap_or_else(|e| panic!("{e}"));
        (tmp, dir, host)
    }

    fn kind<T: std::fmt::Debug>(r: Result<T, DirError>) -> DirErrorKind {
        match r {
            Ok(v) => panic!("expected a refusal, got {v:?}"),
            Err(e) => e.kind,
        }
    }

    #[test]
    fn reads_refuse_links_and_hard_links() {
        let (_tmp, dir, host) = setup();
        symlink(&host, dir.path().join("soft")).unwrap_or_else(|e| panic!("{e}"));
        std::fs::hard_link(&host, dir.path().join("hard")).unwrap_or_else(|e| panic!("{e}"));
        // Without the guard both names read the host file.
        assert_eq!(
            std::fs::read_to_string(dir.path().join("soft")).ok(),
            Some("host secret".into())
        );
        assert!(matches!(kind(dir.read("soft", 100)), DirErrorKind::Symlink));
        assert!(matches!(
            kind(dir.read("hard", 100)),
            DirErrorKind::HardLinked { links: 2 }
        ));
        assert!(matches!(
            kind(dir.read("../host.txt", 100)),
            DirErrorKind::BadName
        ));
        assert_eq!(dir.read("absent", 100).ok().flatten(), None);
    }

    #[test]
    fn a_linked_directory_is_refused() {
        let (tmp, dir, _host) = setup();
        symlink(tmp.path(), dir.path().join("sub")).unwrap_or_else(|e| panic!("{e}"));
        let k = kind(dir.open_dir("sub", true));
        assert!(matches!(k, DirErrorKind::Symlink), "{k:?}");
        assert!(matches!(
            kind(dir.open_dir("sub/x", true)),
            DirErrorKind::Symlink
        ));
        let made = dir.open_dir("a/b", true).unwrap_or_else(|e| panic!("{e}"));
        assert!(made.is_some_and(|d| d.path().ends_with("ws/a/b")));
    }

    #[test]
    fn reads_are_capped() {
        let (_tmp, dir, _host) = setup();
        dir.write_atomic("f", b"0123456789")
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(
            kind(dir.read("f", 4)),
            DirErrorKind::TooLarge { limit: 4 }
        ));
        assert_eq!(
            dir.read_prefix("f", 4).ok().flatten(),
            Some(b"0123".to_vec())
        );
    }

    #[test]
    fn writes_replace_atomically_and_refuse_a_link_target() {
        let (_tmp, dir, host) = setup();
        dir.write_atomic("f", b"one")
            .unwrap_or_else(|e| panic!("{e}"));
        dir.write_atomic("f", b"two")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(dir.read("f", 10).ok().flatten(), Some(b"two".to_vec()));
        symlink(&host, dir.path().join("link")).unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(
            kind(dir.write_atomic("link", b"x")),
            DirErrorKind::Symlink
        ));
        assert_eq!(
            std::fs::read_to_string(&host).ok(),
            Some("host secret".into())
        );
        // No temp file is left behind.
        let names: Vec<_> = dir
            .entries()
            .unwrap_or_else(|e| panic!("{e}"))
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
    }

    #[test]
    fn a_linked_lock_file_is_refused_and_not_created() {
        let (tmp, dir, _host) = setup();
        let target = tmp.path().join("created-outside");
        symlink(&target, dir.path().join(".lock")).unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(
            kind(dir.lock(".lock", true)),
            DirErrorKind::Symlink
        ));
        assert!(!target.exists());
        let held = dir.lock(".other", true).unwrap_or_else(|e| panic!("{e}"));
        drop(held);
        assert!(dir.lock(".other", false).is_ok());
    }
}
