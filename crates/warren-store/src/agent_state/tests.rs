//! The shares work only on what their caller lends (issue 34 §2): with no store lent they
//! count nothing and create nothing, and a failure is an [`AgentStateError`] naming the store,
//! the alias and the typed cause.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use warren_config::InstallRoot;
use warren_core::AgentAlias;

use super::acp::AcpShare;
use super::cron::CronShare;
use super::sessions::SessionsShare;
use super::sop::SopShare;
use super::*;

/// Handles of a caller that holds no store yet (a fresh install, no daemon); counts the
/// requests to create the cron store.
struct NothingLent {
    root: InstallRoot,
    creates: AtomicUsize,
}

impl StoreHandles for NothingLent {
    fn root(&self) -> &InstallRoot {
        &self.root
    }
    fn chat(&self) -> Result<Arc<dyn SessionBackend>, StateCause> {
        Err(StateCause::ChatNotDurable {
            reason: "persistence off".into(),
        })
    }
    fn with_acp<T>(
        &self,
        _: impl FnOnce(&AcpSessionStore) -> Result<T, AcpError>,
    ) -> Result<T, StateCause> {
        Err(StateCause::DaemonAcpClosed)
    }
    fn cron(&self, create: bool) -> Result<Option<Arc<CronStore>>, StateCause> {
        if create {
            self.creates.fetch_add(1, Ordering::SeqCst);
        }
        Ok(None)
    }
    fn control_plane(&self) -> Result<Option<Arc<ControlPlane>>, StateCause> {
        Ok(None)
    }
    fn sop_runs(&self) -> Result<Option<Arc<SopStore>>, StateCause> {
        Ok(None)
    }
}

fn alias(s: &str) -> AgentAlias {
    AgentAlias::new(s).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn shares_open_nothing_and_name_store_alias_and_cause_issue34() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let lent = Arc::new(NothingLent {
        root: InstallRoot::at(dir.path()),
        creates: AtomicUsize::new(0),
    });
    let (b, bee) = (alias("b"), alias("bee"));
    let ws = WorkspaceMove {
        from: dir.path().join("b"),
        to: dir.path().join("bee"),
    };
    let cron = CronShare::new(Arc::clone(&lent));
    let sop = SopShare::new(Arc::clone(&lent));

    // Nothing lent: nothing to count, move or purge, and no file appears.
    for share in [&cron as &dyn AgentState, &sop] {
        let name = share.name();
        assert_eq!(share.count(&b).ok(), Some(0), "{name}");
        assert_eq!(share.rename(&b, &bee, &ws).ok(), Some(0), "{name}");
        assert_eq!(share.purge(&b).ok(), Some(0), "{name}");
    }
    // An empty cron archive asks for no store; a non-empty one would.
    let empty = serde_json::json!({"jobs": [], "runs": []});
    assert_eq!(cron.restore(&bee, &b, empty, &ws).ok(), Some(0));
    assert_eq!(lent.creates.load(Ordering::SeqCst), 0);
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap_or_else(|e| panic!("{e}"))
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(leftovers.is_empty(), "files created: {leftovers:?}");

    // A failure names the store, the alias and the typed cause.
    let e = cron
        .restore(&bee, &b, serde_json::json!("not an archive"), &ws)
        .err()
        .unwrap_or_else(|| panic!("a broken archive restored"));
    assert_eq!((e.store, &e.alias), ("cron", &bee));
    assert!(matches!(*e.cause, StateCause::ArchiveParse(_)), "{e}");
    assert!(
        e.to_string()
            .starts_with("cron store of agent 'bee': archive does not parse"),
        "{e}"
    );
    let e = SessionsShare::new(Arc::clone(&lent))
        .export(&b)
        .err()
        .unwrap_or_else(|| panic!("sessions exported without a backend"));
    assert_eq!(
        e.to_string(),
        "sessions store of agent 'b': chat session persistence is off (persistence off)"
    );
    let e = AcpShare::new(lent)
        .rename(&b, &bee, &ws)
        .err()
        .unwrap_or_else(|| panic!("ACP sessions renamed without a store"));
    assert!(matches!(*e.cause, StateCause::DaemonAcpClosed), "{e}");
    assert_eq!((e.store, &e.alias), ("acp", &b));
}
