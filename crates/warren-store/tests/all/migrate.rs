//! JSONL→SQLite migration (MIG-1..7), run in-process on real files and a real database. The
//! crash tests that kill a real `warren sessions migrate` are in warren-cli/tests.

#![allow(clippy::unwrap_used)]

use std::fs;
use std::path::PathBuf;

use pretty_assertions::assert_eq;
use warren_config::InstallRoot;
use warren_config::schema::{ChannelsConfig, SessionBackendKind, SessionDurability};
use warren_core::{Role, SessionKey};
use warren_store::sessions::migrate::{self, MigrateError, Step};
use warren_store::sessions::{
    JsonlBackend, NewMessage, OpenError, Page, SessionBackend, SessionError, SqliteBackend,
    open_chat_sessions, open_chat_sessions_reporting,
};

type R = Result<(), Box<dyn std::error::Error>>;

fn key(s: &str) -> SessionKey {
    SessionKey::new(s).unwrap()
}

struct Fixture {
    _dir: tempfile::TempDir,
    root: InstallRoot,
}

impl Fixture {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = InstallRoot::at(dir.path().join("w"));
        fs::create_dir_all(root.sessions_dir()).unwrap();
        Self { _dir: dir, root }
    }
    fn path(&self, name: &str) -> PathBuf {
        self.root.sessions_dir().join(name)
    }
    fn write(&self, name: &str, text: &str) {
        fs::write(self.path(name), text).unwrap();
    }
    fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(self.root.sessions_dir())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(".jsonl") && !n.starts_with('.'))
            .collect();
        v.sort();
        v
    }
    fn backend(&self) -> SqliteBackend {
        SqliteBackend::open(&self.root, SessionDurability::Turn).unwrap()
    }
}

fn line(role: &str, content: &str, at: Option<&str>) -> String {
    match at {
        Some(t) => {
            format!("{{\"role\":\"{role}\",\"content\":\"{content}\",\"created_at\":\"{t}\"}}\n")
        }
        None => format!("{{\"role\":\"{role}\",\"content\":\"{content}\"}}\n"),
    }
}

fn contents(b: &dyn SessionBackend, k: &str) -> Vec<String> {
    b.load(&key(k), Page::All)
        .unwrap()
        .messages
        .into_iter()
        .map(|m| m.content)
        .collect()
}

fn names_in(err: &MigrateError) -> String {
    err.to_string()
}

#[test]
fn imports_every_file_once_keeps_timestamps_and_archives_mig1_mig2() -> R {
    let f = Fixture::new();
    let a = line("user", "hello", Some("2024-01-02T03:04:05Z"))
        + &line("assistant", "hi", Some("2024-01-02T03:04:06+01:00"));
    f.write("a.jsonl", &a);
    f.write("b.jsonl", &line("user", "only", None));
    let b = f.backend();
    let report = migrate::import(&b, &mut |_| {})?;
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(report.changed(), 2);
    assert!(report.fenced);
    assert_eq!(contents(&b, "a"), ["hello", "hi"]);
    assert_eq!(contents(&b, "b"), ["only"]);
    let msgs = b.load(&key("a"), Page::All)?.messages;
    assert_eq!(
        msgs[0].created_at.to_string(),
        "2024-01-02 3:04:05.0 +00:00:00"
    );
    assert_eq!(
        msgs[1].created_at.to_string(),
        "2024-01-02 2:04:06.0 +00:00:00"
    );
    assert_eq!(f.names(), ["a.jsonl.migrated", "b.jsonl.migrated"]);
    assert_eq!(
        fs::read_to_string(f.path("a.jsonl.migrated"))?,
        a,
        "archive keeps the source bytes"
    );
    // The receipt binds name, key, SHA-256 and length (MIG-2).
    let conn = rusqlite::Connection::open(f.root.sessions_db())?;
    let (k, len, sha): (String, i64, String) = conn.query_row(
        "SELECT session_key, byte_len, sha256 FROM jsonl_import_receipts WHERE source_name = 'a.jsonl'",
        [],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    )?;
    assert_eq!((k.as_str(), len as usize, sha.len()), ("a", a.len(), 64));
    // A second run is a no-op.
    let again = migrate::import(&b, &mut |_| {})?;
    assert_eq!((again.changed(), again.errors.len()), (0, 0));
    assert!(again.files.iter().all(|f| f.step == Step::Done));
    assert_eq!(contents(&b, "a"), ["hello", "hi"]);
    Ok(())
}

#[test]
fn empty_files_become_empty_sessions_and_junk_stays_in_place_mig5() -> R {
    let f = Fixture::new();
    f.write("empty.jsonl", "");
    f.write("blank.jsonl", "  \n\n\t\n");
    f.write(
        "junk.jsonl",
        "not json\n{\"role\":\"robot\",\"content\":\"x\"}\n",
    );
    let b = f.backend();
    let report = migrate::import(&b, &mut |_| {})?;
    assert_eq!(report.errors.len(), 1);
    let msg = names_in(&report.errors[0]);
    assert!(
        matches!(report.errors[0], MigrateError::NoValidMessages { .. }),
        "{msg}"
    );
    assert!(
        msg.contains("junk.jsonl") && msg.contains("left in place"),
        "{msg}"
    );
    assert_eq!(b.meta(&key("empty"))?.map(|m| m.message_count), Some(0));
    assert_eq!(b.meta(&key("blank"))?.map(|m| m.message_count), Some(0));
    assert!(b.meta(&key("junk"))?.is_none());
    assert_eq!(
        fs::read_to_string(f.path("junk.jsonl"))?,
        "not json\n{\"role\":\"robot\",\"content\":\"x\"}\n"
    );
    assert_eq!(
        f.names(),
        ["blank.jsonl.migrated", "empty.jsonl.migrated", "junk.jsonl"]
    );
    Ok(())
}

#[test]
fn torn_last_line_is_imported_without_it_and_reported() -> R {
    let f = Fixture::new();
    f.write("t.jsonl", &(line("user", "kept", None) + "{\"role\":\"us"));
    let b = f.backend();
    let report = migrate::import(&b, &mut |_| {})?;
    assert!(report.errors.is_empty());
    assert_eq!(contents(&b, "t"), ["kept"]);
    assert_eq!(report.files[0].issues.len(), 1);
    Ok(())
}

#[test]
fn never_merges_into_an_existing_session_and_restores_the_source_mig7() -> R {
    let f = Fixture::new();
    let b = f.backend();
    b.append(&key("dup"), &NewMessage::new(Role::User, "already here"))?;
    f.write("dup.jsonl", &line("user", "legacy", None));
    let report = migrate::import(&b, &mut |_| {})?;
    let msg = names_in(&report.errors[0]);
    assert!(
        matches!(report.errors[0], MigrateError::WouldMerge { .. }),
        "{msg}"
    );
    assert!(
        msg.contains("dup.jsonl") && msg.contains("sessions.db"),
        "{msg}"
    );
    assert_eq!(contents(&b, "dup"), ["already here"]);
    assert_eq!(f.names(), ["dup.jsonl"], "source back at its live name");
    assert!(!report.fenced, "no receipt, no fence");
    Ok(())
}

#[test]
fn live_next_to_staged_is_an_error_naming_both() -> R {
    let f = Fixture::new();
    f.write("k.jsonl", &line("user", "new", None));
    f.write("k.jsonl.importing", &line("user", "old", None));
    let b = f.backend();
    let report = migrate::import(&b, &mut |_| {})?;
    let msg = names_in(&report.errors[0]);
    assert!(
        msg.contains("k.jsonl ") || msg.contains("k.jsonl and"),
        "{msg}"
    );
    assert!(msg.contains("k.jsonl.importing"), "{msg}");
    assert_eq!(f.names(), ["k.jsonl", "k.jsonl.importing"], "nothing moved");
    assert!(b.meta(&key("k"))?.is_none());
    Ok(())
}

#[test]
fn an_archive_that_does_not_match_its_receipt_is_an_error_naming_both() -> R {
    let f = Fixture::new();
    f.write("k.jsonl", &line("user", "x", None));
    let b = f.backend();
    assert!(migrate::import(&b, &mut |_| {})?.errors.is_empty());
    fs::write(f.path("k.jsonl.migrated"), "tampered\n")?;
    let report = migrate::import(&b, &mut |_| {})?;
    let msg = names_in(&report.errors[0]);
    assert!(
        matches!(report.errors[0], MigrateError::ArchiveMismatch { .. }),
        "{msg}"
    );
    assert!(
        msg.contains("k.jsonl.migrated") && msg.contains("sessions.db"),
        "{msg}"
    );
    Ok(())
}

#[test]
fn a_file_changed_between_two_runs_is_refused_not_reimported() -> R {
    let f = Fixture::new();
    f.write("k.jsonl", &line("user", "one", None));
    let b = f.backend();
    assert!(migrate::import(&b, &mut |_| {})?.errors.is_empty());
    // Something wrote the legacy file again after the migration.
    f.write(
        "k.jsonl",
        &(line("user", "one", None) + &line("user", "two", None)),
    );
    let report = migrate::import(&b, &mut |_| {})?;
    let msg = names_in(&report.errors[0]);
    assert!(
        msg.contains("k.jsonl") && msg.contains("k.jsonl.migrated"),
        "{msg}"
    );
    assert_eq!(contents(&b, "k"), ["one"], "no duplicate, no merge");
    assert_eq!(f.names(), ["k.jsonl", "k.jsonl.migrated"]);
    // A staged file that changed after its commit is refused too.
    fs::remove_file(f.path("k.jsonl"))?;
    fs::rename(f.path("k.jsonl.migrated"), f.path("k.jsonl.importing"))?;
    fs::write(f.path("k.jsonl.importing"), "changed\n")?;
    let report = migrate::import(&b, &mut |_| {})?;
    assert!(
        matches!(report.errors[0], MigrateError::StagedMismatch { .. }),
        "{}",
        report.errors[0]
    );
    assert_eq!(contents(&b, "k"), ["one"]);
    Ok(())
}

#[test]
fn two_files_for_the_same_key_are_both_left_alone() -> R {
    let f = Fixture::new();
    f.write("a b.jsonl", &line("user", "space", None));
    f.write("a_b.jsonl", &line("user", "underscore", None));
    f.write("other.jsonl", &line("user", "fine", None));
    let b = f.backend();
    let report = migrate::import(&b, &mut |_| {})?;
    assert_eq!(report.errors.len(), 1);
    let msg = names_in(&report.errors[0]);
    assert!(
        msg.contains("a b.jsonl") && msg.contains("a_b.jsonl"),
        "{msg}"
    );
    assert!(b.meta(&key("a_b"))?.is_none());
    assert_eq!(
        contents(&b, "other"),
        ["fine"],
        "one bad pair does not stop the others"
    );
    assert_eq!(
        f.names(),
        ["a b.jsonl", "a_b.jsonl", "other.jsonl.migrated"]
    );
    Ok(())
}

#[test]
fn a_committed_receipt_fences_jsonl_writes_in_any_handle_mig4() -> R {
    let f = Fixture::new();
    let jsonl = JsonlBackend::open(&f.root, SessionDurability::Turn)?;
    jsonl.append(&key("k"), &NewMessage::new(Role::User, "before"))?;
    // MIG-6: opening SQLite without importing does not fence JSONL.
    drop(f.backend());
    jsonl.append(&key("k"), &NewMessage::new(Role::User, "still jsonl"))?;
    let b = f.backend();
    assert!(migrate::import(&b, &mut |_| {})?.errors.is_empty());
    let err = jsonl
        .append(&key("k"), &NewMessage::new(Role::User, "after"))
        .unwrap_err();
    assert!(matches!(err, SessionError::JsonlFenced { .. }), "{err}");
    assert!(
        f.root.sessions_jsonl_fence().exists(),
        "the fence is durable"
    );
    // A fresh handle (another process would do the same) restores the fence from receipts even
    // without the marker.
    fs::remove_file(f.root.sessions_jsonl_fence())?;
    let fresh = JsonlBackend::open(&f.root, SessionDurability::Turn)?;
    assert!(
        fresh
            .append(&key("z"), &NewMessage::new(Role::User, "x"))
            .is_err()
    );
    assert!(f.root.sessions_jsonl_fence().exists());
    assert_eq!(contents(&b, "k"), ["before", "still jsonl"]);
    Ok(())
}

#[test]
fn dry_run_changes_nothing_and_counts_messages() -> R {
    let f = Fixture::new();
    f.write(
        "a.jsonl",
        &(line("user", "1", None) + &line("user", "2", None)),
    );
    f.write("bad.jsonl", "nope\n");
    let mut last = None;
    let report = migrate::dry_run(&f.root, &mut |p| last = Some(*p))?;
    assert!(report.dry_run);
    assert_eq!(report.files.len(), 1);
    assert_eq!(
        (report.files[0].step, report.files[0].messages),
        (Step::Import, 2)
    );
    assert_eq!(report.errors.len(), 1);
    let p = last.unwrap();
    assert_eq!((p.files_done, p.files_total, p.messages), (2, 2, 2));
    assert!(
        !f.root.sessions_db().exists(),
        "a dry run creates no database"
    );
    assert_eq!(f.names(), ["a.jsonl", "bad.jsonl"]);
    Ok(())
}

#[test]
fn the_factory_imports_on_construction_and_fails_closed_on_conflicts_mig1_mig7() -> R {
    let f = Fixture::new();
    f.write("a.jsonl", &line("user", "x", None));
    let channels = ChannelsConfig::default();
    assert_eq!(channels.session_backend, SessionBackendKind::Sqlite);
    let sessions = open_chat_sessions(&f.root, &channels)?;
    assert!(sessions.is_durable());
    assert_eq!(contents(sessions.backend().as_ref(), "a"), ["x"]);
    drop(sessions);
    f.write("k.jsonl", "");
    f.write("k.jsonl.importing", "");
    let err = open_chat_sessions(&f.root, &channels).unwrap_err();
    assert!(matches!(err, OpenError::Import { .. }), "{err}");
    assert!(err.to_string().contains("k.jsonl.importing"), "{err}");
    Ok(())
}

#[test]
fn jsonl_metadata_moves_into_the_session_row_mig1() -> R {
    let f = Fixture::new();
    {
        let jsonl = JsonlBackend::open(&f.root, SessionDurability::Turn)?;
        jsonl.append(&key("chat"), &NewMessage::new(Role::User, "hello"))?;
        jsonl.ensure(
            &key("chat"),
            &warren_store::sessions::SessionInit {
                agent: None,
                channel: Some("telegram.ops".into()),
                name: None,
            },
        )?;
        jsonl.set_name(&key("chat"), Some("Standup"))?;
        jsonl.set_state(&key("chat"), warren_store::sessions::SessionState::Error)?;
        jsonl.set_agent(&key("chat"), Some(&warren_core::AgentAlias::new("ops")?))?;
    }
    let b = f.backend();
    let report = migrate::import(&b, &mut |_| {})?;
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    let meta = b.meta(&key("chat"))?.unwrap();
    assert_eq!(meta.name.as_deref(), Some("Standup"));
    assert_eq!(meta.channel.as_deref(), Some("telegram.ops"));
    assert_eq!(meta.state, warren_store::sessions::SessionState::Error);
    assert_eq!(meta.agent.as_ref().map(|a| a.as_str()), Some("ops"));
    assert_eq!(contents(&b, "chat"), ["hello"]);
    Ok(())
}

#[test]
fn a_corrupt_sidecar_fails_the_import_safely_with_the_source_back_in_place() -> R {
    let f = Fixture::new();
    f.write("k.jsonl", &line("user", "x", None));
    f.write("k.meta.json", "{broken");
    let b = f.backend();
    let report = migrate::import(&b, &mut |_| {})?;
    assert_eq!(report.errors.len(), 1);
    let e = report.errors[0].to_string();
    assert!(e.contains("k.meta.json"), "{e}");
    assert_eq!(f.names(), ["k.jsonl"]);
    assert!(b.meta(&key("k"))?.is_none());
    Ok(())
}

/// Issue 15 item 7: one non-empty legacy file with no valid message is left in place (MIG-5)
/// and reported, but it no longer blocks the store: the other files are imported and the
/// backend opens.
#[test]
fn one_bad_legacy_file_is_reported_and_the_rest_of_the_store_keeps_working_mig5() -> R {
    let f = Fixture::new();
    f.write("good.jsonl", &line("user", "hello", None));
    let junk = "not json\n{\"role\":\"robot\"}\n";
    f.write("junk.jsonl", junk);
    let channels = ChannelsConfig::default();
    let (sessions, skipped) = open_chat_sessions_reporting(&f.root, &channels)?;
    assert!(sessions.is_durable());
    assert_eq!(contents(sessions.backend().as_ref(), "good"), ["hello"]);
    let skipped: Vec<String> = skipped.iter().map(ToString::to_string).collect();
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    assert!(
        skipped[0].contains(&f.path("junk.jsonl").display().to_string())
            && skipped[0].contains("left in place")
            && skipped[0].contains("warren sessions migrate"),
        "the report names the file and what to do: {skipped:?}"
    );
    assert_eq!(
        fs::read_to_string(f.path("junk.jsonl"))?,
        junk,
        "kept as it was"
    );
    drop(sessions);
    // The plain factory opens too (and logs the same warning); a new session can be written.
    let sessions = open_chat_sessions(&f.root, &channels)?;
    sessions
        .backend()
        .append(&key("fresh"), &NewMessage::new(Role::User, "still works"))?;
    assert_eq!(
        contents(sessions.backend().as_ref(), "fresh"),
        ["still works"]
    );
    assert_eq!(f.names(), ["good.jsonl.migrated", "junk.jsonl"]);
    Ok(())
}

/// Issue 15 item 7: a `.jsonl` symlink (here pointing outside `data/sessions/`) is never
/// followed: its target is not read into the database, nothing is moved, the error names the
/// link; and the progress never passes 100 %.
#[test]
fn a_symlinked_jsonl_is_not_followed_and_progress_stays_within_its_total_mig1() -> R {
    let f = Fixture::new();
    let outside = f.root.root().join("outside-secret.txt");
    let secret = line("user", "a secret outside the sessions directory", None).repeat(200);
    fs::write(&outside, &secret)?;
    std::os::unix::fs::symlink(&outside, f.path("evil.jsonl"))?;
    f.write("good.jsonl", &line("user", "hello", None));
    let b = f.backend();
    let mut seen = Vec::new();
    let report = migrate::import(&b, &mut |p| seen.push(*p))?;
    let errors: Vec<String> = report.errors.iter().map(ToString::to_string).collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains("evil.jsonl") && errors[0].contains("symlink"),
        "{errors:?}"
    );
    assert!(
        b.meta(&key("evil"))?.is_none(),
        "the target was not imported"
    );
    assert_eq!(contents(&b, "good"), ["hello"]);
    assert_eq!(fs::read_to_string(&outside)?, secret, "target untouched");
    assert!(
        fs::symlink_metadata(f.path("evil.jsonl"))?
            .file_type()
            .is_symlink()
    );
    let last = seen.last().copied().unwrap_or_default();
    for p in &seen {
        assert!(
            p.bytes_done <= p.bytes_total && p.files_done <= p.files_total,
            "progress past 100 %: {p:?}"
        );
    }
    assert_eq!((last.files_done, last.files_total), (1, 1), "{seen:?}");
    // The dry run says the same and reads nothing through the link either.
    let dry = migrate::dry_run(&f.root, &mut |_| {})?;
    assert!(
        dry.errors.iter().any(|e| e.to_string().contains("symlink")),
        "{:?}",
        dry.errors
    );
    Ok(())
}
