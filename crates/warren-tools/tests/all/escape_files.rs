//! Escape suite, file tools (PERM-3..6). Each case: the attack works with plain `std::fs`, and
//! fails through Warren's `file_read` / `file_write` / `file_edit`.

// Test helpers outside #[test] fns: a failed setup step should panic with its name.
#![allow(clippy::expect_used)]

use crate::common;

use std::fs;
use std::os::unix::fs::symlink;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use common::{Fixture, assert_denied};
use serde_json::json;
use warren_tools::ToolError;

// ---- agent × sibling matrix -------------------------------------------------------------------

#[test]
fn read_sibling_without_grant_perm3() {
    let f = Fixture::new();
    assert!(fs::read_to_string(f.secret("stranger")).is_ok());
    let msg = assert_denied(f.read("main", f.secret("stranger")));
    assert!(msg.contains("no Read grant on 'stranger'"), "{msg}");
}

#[test]
fn write_sibling_without_grant_perm4() {
    let f = Fixture::new();
    let target = f.ws("stranger").join("pwn.txt");
    fs::write(&target, "baseline").expect("baseline write works");
    fs::remove_file(&target).expect("cleanup");
    let msg = assert_denied(f.write("main", &target, "pwned"));
    assert!(msg.contains("no Write grant on 'stranger'"), "{msg}");
    assert!(!target.exists());
}

#[test]
fn edit_sibling_without_grant_perm4() {
    let f = Fixture::new();
    assert_denied(f.edit("main", f.secret("stranger"), "SECRET", "gone"));
    assert_eq!(
        fs::read_to_string(f.secret("stranger")).ok().as_deref(),
        Some("SECRET-stranger\n")
    );
}

#[test]
fn read_granted_read_root_is_allowed_perm3() {
    let f = Fixture::new();
    let out = f
        .read("main", "../../reader/workspace/secret.txt")
        .expect("Read grant allows reading");
    assert_eq!(out.content["content"], "SECRET-reader\n");
}

#[test]
fn write_into_read_only_grant_perm4() {
    let f = Fixture::new();
    let msg = assert_denied(f.write("main", f.ws("reader").join("x.txt"), "x"));
    assert!(msg.contains("only a Read grant on 'reader'"), "{msg}");
}

#[test]
fn edit_in_read_only_grant_perm4() {
    let f = Fixture::new();
    assert_denied(f.edit("main", f.secret("reader"), "SECRET", "X"));
    assert_eq!(
        fs::read_to_string(f.secret("reader")).ok().as_deref(),
        Some("SECRET-reader\n")
    );
}

#[test]
fn read_write_only_grant_is_an_explicit_deny_perm3() {
    let f = Fixture::new();
    assert!(fs::read_to_string(f.secret("writer")).is_ok());
    let msg = assert_denied(f.read("main", f.secret("writer")));
    assert!(msg.contains("only a Write grant on 'writer'"), "{msg}");
}

#[test]
fn write_into_write_only_grant_is_allowed_perm4() {
    let f = Fixture::new();
    f.write("main", f.ws("writer").join("drop/box.txt"), "delivered")
        .expect("Write grant allows writing");
    assert_eq!(
        fs::read_to_string(f.ws("writer").join("drop/box.txt"))
            .ok()
            .as_deref(),
        Some("delivered")
    );
}

#[test]
fn file_edit_on_write_only_root_is_not_a_read_oracle_perm4() {
    let f = Fixture::new();
    // Without the read requirement, a "not found" vs "replaced" answer would reveal content.
    let msg = assert_denied(f.edit("main", f.secret("writer"), "SECRET-writer", "probe"));
    assert!(msg.contains("only a Write grant"), "{msg}");
    assert_eq!(
        fs::read_to_string(f.secret("writer")).ok().as_deref(),
        Some("SECRET-writer\n")
    );
}

#[test]
fn read_write_grant_allows_read_write_and_edit_perm4() {
    let f = Fixture::new();
    f.read("main", f.secret("both")).expect("read");
    f.edit("main", f.secret("both"), "SECRET", "SHARED")
        .expect("edit");
    f.write("main", f.ws("both").join("new.txt"), "n")
        .expect("write");
    assert_eq!(
        fs::read_to_string(f.secret("both")).ok().as_deref(),
        Some("SHARED-both\n")
    );
}

#[test]
fn grants_are_not_transitive_perm2() {
    let f = Fixture::new();
    // `reader` has no grants of its own: reading through main's grant graph is impossible.
    assert_denied(f.read("reader", f.secret("both")));
    assert_denied(f.read("reader", f.secret("stranger")));
}

// ---- path tricks -----------------------------------------------------------------------------

#[test]
fn dotdot_traversal_perm6() {
    let f = Fixture::new();
    let rel = "../../stranger/workspace/secret.txt";
    assert!(fs::read_to_string(f.ws("main").join(rel)).is_ok());
    assert_denied(f.read("main", rel));
}

#[test]
fn dotdot_hidden_inside_an_allowed_prefix_perm6() {
    let f = Fixture::new();
    let sneaky = f
        .ws("main")
        .join("sub/../../../stranger/workspace/secret.txt");
    fs::create_dir_all(f.ws("main").join("sub")).expect("sub");
    assert!(fs::read_to_string(&sneaky).is_ok());
    assert_denied(f.read("main", &sneaky));
}

#[test]
fn absolute_path_outside_the_workspace_perm6() {
    let f = Fixture::new();
    assert!(
        fs::read_to_string("/etc/hostname").is_ok() || fs::read_to_string("/etc/passwd").is_ok()
    );
    assert_denied(f.read("main", "/etc/passwd"));
}

#[test]
fn symlink_in_the_middle_of_a_path_perm6() {
    let f = Fixture::new();
    symlink(f.ws("stranger"), f.ws("main").join("door")).expect("symlink");
    assert!(fs::read_to_string(f.ws("main").join("door/secret.txt")).is_ok());
    assert_denied(f.read("main", "door/secret.txt"));
}

#[test]
fn symlink_as_the_leaf_perm6() {
    let f = Fixture::new();
    symlink(f.secret("stranger"), f.ws("main").join("leaf")).expect("symlink");
    assert!(fs::read_to_string(f.ws("main").join("leaf")).is_ok());
    assert_denied(f.read("main", "leaf"));
}

#[test]
fn relative_symlink_chain_out_of_the_workspace_perm6() {
    let f = Fixture::new();
    symlink("../../stranger/workspace", f.ws("main").join("hop1")).expect("symlink");
    symlink("hop1/secret.txt", f.ws("main").join("hop2")).expect("symlink");
    assert!(fs::read_to_string(f.ws("main").join("hop2")).is_ok());
    assert_denied(f.read("main", "hop2"));
}

#[test]
fn symlink_loop_is_refused_not_followed_forever_perm6() {
    let f = Fixture::new();
    symlink("loop-b", f.ws("main").join("loop-a")).expect("symlink");
    symlink("loop-a", f.ws("main").join("loop-b")).expect("symlink");
    let msg = assert_denied(f.read("main", "loop-a"));
    assert!(msg.contains("too many symbolic links"), "{msg}");
}

#[test]
fn dangling_symlink_as_a_write_target_perm6() {
    let f = Fixture::new();
    let outside = f.ws("stranger").join("planted.txt");
    symlink(&outside, f.ws("main").join("dangle")).expect("symlink");
    fs::write(f.ws("main").join("dangle"), "baseline").expect("baseline follows the dangling link");
    assert!(outside.exists());
    fs::remove_file(&outside).expect("cleanup");
    assert_denied(f.write("main", "dangle", "pwned"));
    assert!(!outside.exists(), "nothing was written outside");
}

#[test]
fn hard_link_to_an_outside_file_in_a_shared_root_perm6() {
    let f = Fixture::new();
    // A hard link in the read-write root `both`, pointing at stranger's secret.
    let link = f.ws("both").join("hl.txt");
    fs::hard_link(f.secret("stranger"), &link).expect("hard link");
    let msg = assert_denied(f.write("main", &link, "pwned"));
    assert!(msg.contains("hard link"), "{msg}");
    assert_denied(f.edit("main", &link, "SECRET", "pwned"));
    assert_eq!(
        fs::read_to_string(f.secret("stranger")).ok().as_deref(),
        Some("SECRET-stranger\n")
    );
}

#[test]
fn hard_link_replaced_atomically_in_own_workspace_never_writes_through_perm6() {
    let f = Fixture::new();
    let link = f.ws("main").join("hl.txt");
    fs::hard_link(f.secret("stranger"), &link).expect("hard link");
    // Own workspace: the write replaces the directory entry (temp + rename), not the inode.
    f.write("main", "hl.txt", "mine")
        .expect("write in own workspace");
    assert_eq!(
        fs::read_to_string(f.secret("stranger")).ok().as_deref(),
        Some("SECRET-stranger\n")
    );
}

#[test]
fn proc_self_root_perm6() {
    let f = Fixture::new();
    let via_proc = format!("/proc/self/root{}", f.secret("stranger").display());
    assert!(fs::read_to_string(&via_proc).is_ok());
    assert_denied(f.read("main", &via_proc));
}

#[test]
fn proc_self_cwd_perm6() {
    let f = Fixture::new();
    assert!(fs::read_to_string("/proc/self/cwd/Cargo.toml").is_ok());
    assert_denied(f.read("main", "/proc/self/cwd/Cargo.toml"));
}

#[test]
fn proc_self_fd_perm6() {
    let f = Fixture::new();
    let file = fs::File::open(f.secret("stranger")).expect("open");
    let via_fd = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&file));
    assert!(fs::read_to_string(&via_fd).is_ok());
    assert_denied(f.read("main", &via_fd));
}

#[test]
fn device_files_are_readable_perm5() {
    let f = Fixture::new();
    let out = f.read("main", "/dev/null").expect("/dev/null readable");
    assert_eq!(out.content["content"], "");
    f.write("main", "/dev/null", "discarded")
        .expect("/dev/null writable");
    assert_denied(f.write("main", "/dev/zero", "x"));
    // /dev/urandom is readable; its bytes are not text, which the tool reports instead of hanging.
    let err = f.read("main", "/dev/urandom").err();
    assert!(matches!(err, Some(ToolError::Failed(_))), "{err:?}");
}

#[test]
fn fifo_in_the_workspace_does_not_hang_the_reader_perm6() {
    let f = Fixture::new();
    let fifo = f.ws("main").join("pipe");
    let status = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo");
    assert!(status.success());
    let err = f.read("main", "pipe").err();
    assert!(
        matches!(&err, Some(ToolError::Failed(m)) if m.contains("not a regular file")),
        "{err:?}"
    );
}

#[test]
fn unix_socket_is_not_read_as_a_file_perm6() {
    let f = Fixture::new();
    let _sock = std::os::unix::net::UnixListener::bind(f.ws("main").join("sock")).expect("socket");
    let err = f.read("main", "sock").err();
    assert!(
        matches!(&err, Some(ToolError::Failed(m)) if m.contains("not a regular file")),
        "{err:?}"
    );
}

#[test]
fn symlink_swapped_in_after_the_check_never_escapes_perm6() {
    let f = Fixture::new();
    let racy = f.ws("main").join("racy");
    let real = f.ws("main").join("real.txt");
    fs::write(&real, "harmless\n").expect("real");
    fs::write(&racy, "harmless\n").expect("racy");
    let stop = Arc::new(AtomicBool::new(false));
    let flipper = {
        let (stop, racy, real, secret) = (
            stop.clone(),
            racy.clone(),
            real.clone(),
            f.secret("stranger"),
        );
        std::thread::spawn(move || {
            let tmp = racy.with_extension("tmp");
            while !stop.load(Ordering::Relaxed) {
                let _ = symlink(&secret, &tmp);
                let _ = fs::rename(&tmp, &racy);
                let _ = fs::copy(&real, &tmp);
                let _ = fs::rename(&tmp, &racy);
            }
        })
    };
    let mut leaked = 0;
    let mut reads = 0;
    for _ in 0..400 {
        if let Ok(out) = f.read("main", "racy") {
            reads += 1;
            if out.content["content"]
                .as_str()
                .is_some_and(|c| c.contains("SECRET"))
            {
                leaked += 1;
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    flipper.join().expect("flipper");
    assert_eq!(
        leaked, 0,
        "a swapped-in symlink leaked the secret ({reads} successful reads)"
    );
}

#[test]
fn directory_swapped_for_a_symlink_during_writes_never_writes_outside_perm6() {
    let f = Fixture::new();
    let dir = f.ws("main").join("dir");
    fs::create_dir_all(&dir).expect("dir");
    let stop = Arc::new(AtomicBool::new(false));
    let flipper = {
        let (stop, dir, outside) = (stop.clone(), dir.clone(), f.ws("stranger"));
        std::thread::spawn(move || {
            let parked = dir.with_extension("parked");
            while !stop.load(Ordering::Relaxed) {
                let _ = fs::rename(&dir, &parked);
                let _ = symlink(&outside, &dir);
                let _ = fs::remove_file(&dir);
                let _ = fs::rename(&parked, &dir);
            }
        })
    };
    for i in 0..300 {
        let _ = f.write("main", format!("dir/f{i}.txt"), "x");
    }
    stop.store(true, Ordering::Relaxed);
    flipper.join().expect("flipper");
    let planted: Vec<_> = fs::read_dir(f.ws("stranger"))
        .expect("stranger ws")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with('f'))
        .collect();
    assert!(
        planted.is_empty(),
        "files written outside through a swapped symlink: {planted:?}"
    );
}

#[test]
fn install_root_config_and_secret_key_are_never_readable_perm6() {
    let f = Fixture::new();
    let roamer_reads_config = f.read("roamer", f.root.config_file());
    assert!(fs::read_to_string(f.root.config_file()).is_ok());
    let msg = assert_denied(roamer_reads_config);
    assert!(msg.contains("install root"), "{msg}");
    assert_denied(f.write("roamer", f.root.config_file(), "[agents.evil]\n"));
    assert_denied(f.read("roamer", f.root.secret_key()));
}

#[test]
fn unrestricted_agent_still_respects_forbidden_paths_perm2() {
    let f = Fixture::new();
    assert!(
        f.read("roamer", "/etc/hostname").is_ok() || f.read("roamer", "/etc/os-release").is_ok()
    );
    let msg = assert_denied(f.read("roamer", "/etc/shadow"));
    assert!(msg.contains("forbidden path"), "{msg}");
}

#[test]
fn read_only_autonomy_cannot_write_perm2() {
    let f = Fixture::new();
    let msg = assert_denied(f.write("readonly", "x.txt", "x"));
    assert!(msg.contains("read_only"), "{msg}");
    assert!(!f.ws("readonly").join("x.txt").exists());
}

// ---- bad input from the model -----------------------------------------------------------------

#[test]
fn nul_byte_in_a_path_is_refused_without_panic() {
    let f = Fixture::new();
    let msg = assert_denied(f.read("main", "a\u{0}b"));
    assert!(msg.contains("NUL"), "{msg}");
}

#[test]
fn a_100kb_path_is_refused() {
    let f = Fixture::new();
    let long = "a/".repeat(50_000);
    let msg = assert_denied(f.write("main", &long, "x"));
    assert!(msg.contains("longer than"), "{msg}");
}

#[test]
fn negative_or_zero_line_ranges_are_argument_errors() {
    let f = Fixture::new();
    f.write("main", "n.txt", "1\n2\n").expect("write");
    for args in [
        json!({"path": "n.txt", "offset": -1}),
        json!({"path": "n.txt", "limit": -5}),
        json!({"path": "n.txt", "offset": 0}),
    ] {
        let err = f.call("main", "file_read", args.clone()).err();
        assert!(
            matches!(err, Some(ToolError::InvalidArguments(_))),
            "{args}: {err:?}"
        );
    }
}

#[test]
fn json_of_the_wrong_shape_is_an_argument_error() {
    let f = Fixture::new();
    for (tool, args) in [
        ("file_read", json!({"path": 42})),
        ("file_read", json!(["n.txt"])),
        ("file_write", json!({"path": "x"})),
        (
            "file_write",
            json!({"path": "x", "content": "y", "mode": 777}),
        ),
        (
            "file_edit",
            json!({"path": "x", "old_string": "", "new_string": "y"}),
        ),
    ] {
        let err = f.call("main", tool, args.clone()).err();
        assert!(
            matches!(err, Some(ToolError::InvalidArguments(_))),
            "{tool} {args}: {err:?}"
        );
    }
    assert!(!f.ws("main").join("x").exists(), "no partial write");
}

#[test]
fn file_edit_requires_a_unique_exact_match() {
    let f = Fixture::new();
    f.write("main", "e.txt", "a a b").expect("write");
    let err = f.edit("main", "e.txt", "a", "z").err();
    assert!(
        matches!(&err, Some(ToolError::Failed(m)) if m.contains("matches 2 times")),
        "{err:?}"
    );
    f.edit("main", "e.txt", "b", "c").expect("unique match");
    assert_eq!(
        fs::read_to_string(f.ws("main").join("e.txt"))
            .ok()
            .as_deref(),
        Some("a a c")
    );
}

#[test]
fn binary_and_oversized_files_are_reported_not_returned() {
    let f = Fixture::new();
    fs::write(f.ws("main").join("bin"), [0u8, 1, 2, 3]).expect("bin");
    let err = f.read("main", "bin").err();
    assert!(
        matches!(&err, Some(ToolError::Failed(m)) if m.contains("binary")),
        "{err:?}"
    );
    let big = fs::File::create(f.ws("main").join("big")).expect("big");
    big.set_len(warren_tools::MAX_READ_BYTES + 1).expect("size");
    let err = f.read("main", "big").err();
    assert!(
        matches!(&err, Some(ToolError::Failed(m)) if m.contains("larger than")),
        "{err:?}"
    );
}

// ---- hard links (PERM-6) ------------------------------------------------------------------------

#[test]
fn file_read_refuses_a_hard_link_to_a_sibling_file_even_in_the_own_workspace_perm6() {
    let f = Fixture::new();
    // Someone with access to both directories (the operator, a sibling with a Write grant, a
    // host process) leaves a second name of stranger's secret in main's workspace.
    let link = f.ws("main").join("notes.txt");
    fs::hard_link(f.secret("stranger"), &link).expect("hard link");
    assert_eq!(
        fs::read_to_string(&link).ok().as_deref(),
        Some("SECRET-stranger\n"),
        "baseline: the link reads the sibling's file"
    );
    let msg = assert_denied(f.read("main", "notes.txt"));
    assert_eq!(
        msg,
        format!(
            "{}: has 2 hard links; Warren refuses to read hard-linked files anywhere, even in the \
             agent's own workspace, because another name of the same file may lie outside the \
             agent's readable roots (PERM-6)",
            link.display()
        )
    );
    // file_edit reads first: it cannot be used to probe the content either.
    let msg = assert_denied(f.edit("main", "notes.txt", "SECRET", "x"));
    assert!(msg.contains("has 2 hard links"), "{msg}");
    assert_eq!(
        fs::read_to_string(f.secret("stranger")).ok().as_deref(),
        Some("SECRET-stranger\n")
    );
}

#[test]
fn file_read_refuses_a_hard_link_in_a_read_grant_perm6() {
    let f = Fixture::new();
    let link = f.ws("reader").join("shared.txt");
    fs::hard_link(f.secret("stranger"), &link).expect("hard link");
    assert!(fs::read_to_string(&link).is_ok_and(|s| s.contains("SECRET-stranger")));
    let msg = assert_denied(f.read("main", &link));
    assert!(msg.contains("has 2 hard links"), "{msg}");
    // Once the other name is gone, the same file reads normally.
    fs::remove_file(f.secret("stranger")).expect("unlink the other name");
    let out = f.read("main", &link).expect("a single link reads");
    assert_eq!(out.content["content"], "SECRET-stranger\n");
}

// ---- one refusal outside the roots: no existence, type or target oracle (PERM-6) ---------------

/// The refusal with the requested path (as given, the prefix of every message) cut off.
#[track_caller]
fn reason(path: &str, msg: &str) -> String {
    msg.strip_prefix(&format!("{path}: "))
        .unwrap_or_else(|| panic!("{msg:?} does not start with the requested path {path:?}"))
        .to_string()
}

/// A sibling workspace holding one of everything an attacker may want to tell apart.
fn plant_everything(f: &Fixture) {
    let s = f.ws("stranger");
    fs::create_dir_all(s.join("dir/sub")).expect("dir");
    symlink(s.join("secret.txt"), s.join("link")).expect("symlink");
    symlink("/etc/passwd", s.join("host-link")).expect("symlink");
    symlink("nowhere", s.join("dangling")).expect("symlink");
    symlink("loop", s.join("loop")).expect("symlink");
}

#[test]
fn refusals_in_a_sibling_workspace_are_identical_whatever_is_there_perm6() {
    let f = Fixture::new();
    plant_everything(&f);
    let s = f.ws("stranger").display().to_string();
    let probes: Vec<String> = [
        "secret.txt",               // an existing file
        "missing.txt",              // a missing file
        "secret.txt/x",             // a file used as a directory
        "dir",                      // a directory
        "dir/sub/../../secret.txt", // '..' inside
        "missing/../secret.txt",    // '..' after a missing component
        "secret.txt/../secret.txt", // '..' after a file
        "link",                     // a symlink to a file
        "host-link",                // a symlink out of the install root
        "dangling",                 // a dangling symlink
        "loop",                     // a symlink loop
    ]
    .iter()
    .map(|p| format!("{s}/{p}"))
    .chain([
        "../../stranger/workspace/secret.txt".to_string(),
        "../../stranger/workspace/missing/../secret.txt".to_string(),
        format!("{}/../../stranger/workspace/loop", f.ws("main").display()),
    ])
    .collect();
    // Without Warren's guard the probes are an oracle: they answer in at least five ways.
    let mut plain: Vec<String> = probes
        .iter()
        .map(|p| match fs::metadata(f.ws("main").join(p)) {
            Ok(m) if m.is_dir() => "directory".into(),
            Ok(_) => "file".into(),
            Err(e) => e.kind().to_string(),
        })
        .collect();
    plain.sort();
    plain.dedup();
    assert!(
        plain.len() >= 5,
        "baseline: the probes are told apart {plain:?}"
    );
    let expected_read = "it is in agent 'stranger''s workspace and agent 'main' has no Read grant on \
                         'stranger' (add [agents.main.workspace.access] stranger = \"Read\")";
    let expected_write = expected_read.replace("Read", "Write");
    for p in &probes {
        let read = reason(p, &assert_denied(f.read("main", p)));
        assert_eq!(read, expected_read, "file_read {p}");
        let write = reason(p, &assert_denied(f.write("main", p, "x")));
        assert_eq!(write, expected_write, "file_write {p}");
        let edit = reason(p, &assert_denied(f.edit("main", p, "SECRET", "x")));
        assert_eq!(edit, expected_read, "file_edit {p}");
    }
    assert!(!f.ws("stranger").join("missing.txt").exists());
}

#[test]
fn symlinks_leading_out_of_the_roots_get_one_refusal_that_hides_the_target_perm6() {
    let f = Fixture::new();
    plant_everything(&f);
    let (me, s) = (f.ws("main"), f.ws("stranger"));
    for (name, target) in [
        ("to-secret", s.join("secret.txt")),
        ("to-missing", s.join("missing.txt")),
        ("to-file-as-dir", s.join("secret.txt/x")),
        ("to-dir", s.join("dir")),
        ("to-dotdot", s.join("missing/../secret.txt")),
        ("to-loop", s.join("loop")),
        ("to-host", "/etc/passwd".into()),
        ("to-nowhere", "/nonexistent/nowhere".into()),
        ("door", s.clone()),
    ] {
        symlink(&target, me.join(name)).expect("symlink");
    }
    let probes = [
        "to-secret",
        "to-missing",
        "to-file-as-dir",
        "to-dir",
        "to-dotdot",
        "to-loop",
        "to-host",
        "to-nowhere",
        "door/secret.txt",
        "door/missing.txt",
        "door/secret.txt/x",
        "door/dir/../secret.txt",
        "door/missing/../secret.txt",
    ];
    // Without Warren's guard the links answer in many ways (content, not found, not a
    // directory, a loop).
    let mut plain: Vec<String> = probes
        .iter()
        .map(|p| match fs::read_to_string(me.join(p)) {
            Ok(text) => text,
            Err(e) => e.kind().to_string(),
        })
        .collect();
    assert!(plain.iter().any(|t| t.contains("SECRET-stranger")));
    plain.sort();
    plain.dedup();
    assert!(
        plain.len() >= 4,
        "baseline: the links are told apart {plain:?}"
    );
    let expected = |verb: &str, grants: &str| {
        format!(
            "a symbolic link or '..' on this path leads outside what agent 'main' may {verb} \
             (its workspace and its {grants} and ReadWrite grants); Warren does not follow it \
             there or say where it leads (PERM-6)"
        )
    };
    for p in probes {
        let read = reason(p, &assert_denied(f.read("main", p)));
        assert_eq!(read, expected("read", "Read"), "file_read {p}");
        let write = reason(p, &assert_denied(f.write("main", p, "x")));
        assert_eq!(write, expected("write", "Write"), "file_write {p}");
    }
    assert!(
        !s.join("missing.txt").exists(),
        "nothing was written outside"
    );
}
