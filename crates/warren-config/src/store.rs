//! `ConfigStore`: the single in-process owner of config (SPEC CFG-1..5, STATE-1, STATE-19).
//!
//! - Readers take an `Arc<Snapshot>` (a brief read lock, never held across I/O).
//! - Every writer (CLI, gateway, RPC, lifecycle) goes through ONE [`WriteTxn`]: first the async
//!   mutex, then the cross-process lock file `data/config.lock` through a descriptor of its own
//!   (so two `warren` processes, or two threads, never interleave a read-modify-write; see
//!   [`crate::lock`]), then the sync `RwLock` only to publish. A transaction whose base no
//!   longer matches the file on disk is refused (stale read, CFG-2).
//! - Edits are dirty-path edits on the TOML document; commit validates the exact bytes it will
//!   write, encrypts new secret values, saves atomically (CFG-4/5) and publishes generation N+1.
//! - A store that was not loaded from a file refuses to save (see [`ConfigError::Unbound`]).

use std::fs::OpenOptions;
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use toml_edit::{DocumentMut, Item, Table, Value};
use warren_core::AgentAlias;

use crate::atomic::{self, CrashPoints};
use crate::checks::StateCheck;
use crate::edit;
use crate::error::{ConfigError, Problem};
use crate::keypath::KeyPath;
use crate::load::{self, Parsed};
use crate::lock::{FileLock, WriteLock};
use crate::paths::InstallRoot;
use crate::schema::Config;
use crate::secrets::{ENC_PREFIX, LazyKey};

/// A published config generation.
#[derive(Debug)]
pub struct Snapshot {
    generation: u64,
    config: Config,
    doc: DocumentMut,
    /// The file bytes this generation was parsed from (`None` for an unbound store).
    disk: Option<String>,
}

impl Snapshot {
    pub fn generation(&self) -> u64 {
        self.generation
    }
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The secret fields written in plaintext in the file (key paths, never values; issue 35
    /// §9): `warren config encrypt-secrets` encrypts them.
    pub fn plaintext_secrets(&self) -> Vec<KeyPath> {
        crate::plaintext::plaintext_secrets(&self.config, &self.doc)
    }
}

impl std::ops::Deref for Snapshot {
    type Target = Config;
    fn deref(&self) -> &Config {
        &self.config
    }
}

struct Shared {
    root: InstallRoot,
    bound: bool,
    /// Whether this store already swept temp files a crashed writer left (once per store).
    swept: AtomicBool,
    live: RwLock<Arc<Snapshot>>,
    writer: tokio::sync::Mutex<()>,
    /// Rules over durable state (e.g. the MEM-9 memory backend lock), run on every write and
    /// reload.
    checks: RwLock<Vec<Arc<dyn StateCheck>>>,
}

/// The config owner. Cheap to clone; clones share one generation sequence and one write lock.
#[derive(Clone)]
pub struct ConfigStore {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for ConfigStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfigStore")
            .field("root", &self.shared.root)
            .field("generation", &self.generation())
            .finish()
    }
}

/// What a successful commit did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitOutcome {
    /// The generation now published.
    pub generation: u64,
    /// The key paths written.
    pub changed: Vec<String>,
    /// Non-fatal problems (e.g. the directory sync after the rename failed; CFG-5).
    pub warnings: Vec<String>,
}

impl ConfigStore {
    /// Loads `<install>/config.toml`. The store is bound to that file and may save it.
    pub fn load(root: InstallRoot) -> Result<Self, ConfigError> {
        let path = root.config_file();
        let text = read_config(&root)?;
        if InstallRoot::is_group_or_world_readable(&path) {
            tracing::warn!(path = %path.display(), "config file is readable by other users; run chmod 600 on it");
        }
        let Parsed { config, doc } = load::parse(&path, &text, &root.secret_key())?;
        Ok(Self::new(
            root,
            true,
            Snapshot {
                generation: 1,
                config,
                doc,
                disk: Some(text),
            },
        ))
    }

    /// An in-memory store (embedded defaults, tests). Every commit is refused with
    /// [`ConfigError::Unbound`]: such a config must never overwrite a file.
    pub fn unbound(root: InstallRoot, config: Config) -> Self {
        Self::new(
            root,
            false,
            Snapshot {
                generation: 1,
                config,
                doc: DocumentMut::new(),
                disk: None,
            },
        )
    }

    fn new(root: InstallRoot, bound: bool, snapshot: Snapshot) -> Self {
        Self {
            shared: Arc::new(Shared {
                root,
                bound,
                swept: AtomicBool::new(false),
                live: RwLock::new(Arc::new(snapshot)),
                writer: tokio::sync::Mutex::new(()),
                checks: RwLock::new(Vec::new()),
            }),
        }
    }

    pub fn root(&self) -> &InstallRoot {
        &self.shared.root
    }

    /// Registers a rule over durable state; every later write and reload must pass it.
    pub fn with_check(self, check: Arc<dyn StateCheck>) -> Self {
        match self.shared.checks.write() {
            Ok(mut g) => g.push(check),
            Err(p) => p.into_inner().push(check),
        }
        self
    }

    /// Runs the registered checks on the current generation as a whole (`config validate`,
    /// daemon start): the same error shape as any other invalid config.
    pub fn check_current(&self) -> Result<(), ConfigError> {
        let snapshot = self.snapshot();
        self.run_checks(None, &snapshot.config)
    }

    fn run_checks(&self, previous: Option<&Config>, config: &Config) -> Result<(), ConfigError> {
        let checks: Vec<Arc<dyn StateCheck>> = match self.shared.checks.read() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        };
        let mut problems: Vec<Problem> = checks
            .iter()
            .flat_map(|c| c.check(&self.shared.root, previous, config))
            .collect();
        if problems.is_empty() {
            Ok(())
        } else {
            // A check may quote a secret it used (a connection URL in a server's error):
            // the secrets of both generations are redacted (CFG-6).
            let mut redactor = crate::redact::Redactor::from_config(config);
            if let Some(previous) = previous {
                redactor.add_config(previous);
            }
            crate::error::redact_problems(&mut problems, &redactor);
            Err(ConfigError::Invalid {
                file: self.shared.root.config_file(),
                problems,
            })
        }
    }

    /// The current generation.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        match self.shared.live.read() {
            Ok(guard) => Arc::clone(&guard),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }

    pub fn generation(&self) -> u64 {
        self.snapshot().generation
    }

    /// Starts a write from async code: async mutex, then the cross-process lock (off the
    /// async workers).
    pub async fn write(&self) -> Result<WriteTxn<'_>, ConfigError> {
        let lock = self.lock_async().await?;
        self.begin(lock)
    }

    /// Starts a write from synchronous code (the CLI). Must not be called on an async worker.
    pub fn write_blocking(&self) -> Result<WriteTxn<'_>, ConfigError> {
        let lock = self.lock_blocking()?;
        self.begin(lock)
    }

    /// [`Self::write_blocking`] on config.toml as it is now, for a one-shot process (the CLI):
    /// a file changed since this store loaded it (another writer, a hand edit) is reloaded
    /// under the same lock instead of refusing the write as stale, so a concurrent writer
    /// neither loses its change nor makes this one fail (issue 15 §1, §3). A changed file that
    /// does not load is the error, and nothing is written.
    pub fn write_latest_blocking(&self) -> Result<WriteTxn<'_>, ConfigError> {
        let lock = self.lock_blocking()?;
        if let Some(loaded) = &self.snapshot().disk
            && &read_config(&self.shared.root)? != loaded
        {
            self.reload_locked()?;
        }
        self.begin(lock)
    }

    async fn lock_async(&self) -> Result<WriteLock<'_>, ConfigError> {
        let guard = self.shared.writer.lock().await;
        if !self.shared.bound {
            return Ok(WriteLock::new(guard, None));
        }
        let root = self.shared.root.clone();
        let file = tokio::task::spawn_blocking(move || FileLock::acquire(&root))
            .await
            .map_err(|e| ConfigError::Lock {
                path: self.shared.root.config_lock(),
                cause: io::Error::other(e.to_string()),
            })??;
        Ok(WriteLock::new(guard, Some(file)))
    }

    fn lock_blocking(&self) -> Result<WriteLock<'_>, ConfigError> {
        let guard = self.shared.writer.blocking_lock();
        let file = if self.shared.bound {
            Some(FileLock::acquire(&self.shared.root)?)
        } else {
            None
        };
        Ok(WriteLock::new(guard, file))
    }

    fn begin<'a>(&'a self, lock: WriteLock<'a>) -> Result<WriteTxn<'a>, ConfigError> {
        let base = self.snapshot();
        if let Some(loaded) = &base.disk {
            let now = read_config(&self.shared.root)?;
            if &now != loaded {
                return Err(ConfigError::Stale {
                    path: self.shared.root.config_file(),
                    generation: base.generation,
                });
            }
        }
        Ok(WriteTxn {
            store: self,
            _lock: lock,
            doc: base.doc.clone(),
            base,
            dirty: Vec::new(),
            validated: None,
        })
    }

    /// STATE-19: re-reads config.toml and publishes it as a new generation. On any error the
    /// running generation stays and the error is returned.
    pub async fn reload(&self) -> Result<u64, ConfigError> {
        let _locks = self.lock_async().await?;
        self.reload_locked()
    }

    /// [`Self::reload`] for synchronous callers.
    pub fn reload_blocking(&self) -> Result<u64, ConfigError> {
        let _locks = self.lock_blocking()?;
        self.reload_locked()
    }

    fn reload_locked(&self) -> Result<u64, ConfigError> {
        if !self.shared.bound {
            return Err(ConfigError::Unbound);
        }
        let root = &self.shared.root;
        let text = read_config(root)?;
        let Parsed { config, doc } = load::parse(&root.config_file(), &text, &root.secret_key())?;
        self.run_checks(Some(&self.snapshot().config), &config)?;
        Ok(self.publish(config, doc, Some(text)))
    }

    fn publish(&self, config: Config, doc: DocumentMut, disk: Option<String>) -> u64 {
        let mut live = match self.shared.live.write() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        let generation = live.generation + 1;
        *live = Arc::new(Snapshot {
            generation,
            config,
            doc,
            disk,
        });
        generation
    }
}

/// An open write: holds the config write lock until committed or dropped.
pub struct WriteTxn<'a> {
    store: &'a ConfigStore,
    _lock: WriteLock<'a>,
    base: Arc<Snapshot>,
    doc: DocumentMut,
    dirty: Vec<KeyPath>,
    /// The last text that passed validation and its parse, so commit does not redo it.
    validated: Option<(String, Config)>,
}

impl WriteTxn<'_> {
    /// The config this write started from.
    pub fn base(&self) -> &Config {
        &self.base.config
    }

    /// Sets `path` to a TOML value (validated on commit).
    pub fn set(&mut self, path: &KeyPath, value: Value) -> Result<(), ConfigError> {
        edit::set(&mut self.doc, path, value)?;
        self.validated = None;
        self.mark(path);
        Ok(())
    }

    /// Sets `path` from command-line text: a TOML literal (`8080`, `true`, `["a"]`) when that
    /// fits the schema, else the text as a string. Validates immediately; on error nothing
    /// changes in this transaction.
    pub fn set_from_str(&mut self, path: &KeyPath, raw: &str) -> Result<(), ConfigError> {
        let as_string = Value::from(raw);
        let literal = raw.parse::<Value>().ok().filter(|v| !v.is_str());
        let Some(literal) = literal else {
            return self.try_edit(path, |doc| edit::set(doc, path, as_string));
        };
        match self.try_edit(path, |doc| edit::set(doc, path, literal)) {
            Ok(()) => Ok(()),
            Err(first) => self
                .try_edit(path, |doc| edit::set(doc, path, as_string))
                .map_err(|_| first),
        }
    }

    /// Sets a secret field (stored encrypted on commit). Refuses paths that are not secrets.
    pub fn set_secret(&mut self, path: &KeyPath, plaintext: &str) -> Result<(), ConfigError> {
        let checkpoint = self.checkpoint();
        self.try_edit(path, |doc| edit::set(doc, path, Value::from(plaintext)))?;
        let is_secret = self
            .validate()?
            .secrets_mut()
            .iter()
            .any(|(p, _)| p.parse::<KeyPath>().ok().as_ref() == Some(path));
        if !is_secret {
            self.restore(checkpoint);
            self.dirty.retain(|d| d != path);
            return Err(ConfigError::Edit {
                key: path.to_string(),
                message: "not a secret field (secret fields: providers.<name>.api_key, memory.embedder.api_key, \
                          memory.postgres.url, gateway.paired_tokens)"
                    .into(),
            });
        }
        Ok(())
    }

    /// Removes `path` from the file (its default applies again).
    pub fn remove(&mut self, path: &KeyPath) -> Result<bool, ConfigError> {
        let removed = edit::remove(&mut self.doc, path)?;
        if removed {
            self.validated = None;
            self.mark(path);
        }
        Ok(removed)
    }

    /// Adds `[agents.<alias>]` with the given fields; refuses an alias that exists.
    pub fn add_agent(
        &mut self,
        alias: &AgentAlias,
        fields: &[(&str, &str)],
    ) -> Result<(), ConfigError> {
        let path = KeyPath::default()
            .push_key("agents")
            .push_key(alias.as_str());
        if self.base.config.agents.contains_key(alias.as_str())
            || edit::get(&self.doc, &path).is_some()
        {
            return Err(ConfigError::Edit {
                key: path.to_string(),
                message: format!("agent '{alias}' already exists"),
            });
        }
        let mut table = Table::new();
        for (k, v) in fields {
            table.insert(k, Item::Value(Value::from(*v)));
        }
        self.try_edit(&path, |doc| edit::set_item(doc, &path, Item::Table(table)))
    }

    /// The whole item at `path` in the edited document as TOML text (`[t]` tables included),
    /// or `None` when absent. Used by agent lifecycle to capture and move `[agents.<alias>]`.
    pub fn item_text(&self, path: &KeyPath) -> Option<String> {
        let item = edit::get(&self.doc, path)?.clone();
        let mut doc = DocumentMut::new();
        doc.insert("item", item);
        Some(doc.to_string())
    }

    /// Sets `path` to an item captured by [`WriteTxn::item_text`] (not validated until
    /// [`WriteTxn::preview`] or commit).
    pub fn set_item_text(&mut self, path: &KeyPath, text: &str) -> Result<(), ConfigError> {
        let doc: DocumentMut = text.parse().map_err(|e| ConfigError::Edit {
            key: path.to_string(),
            message: format!("captured entry does not parse: {e}"),
        })?;
        let Some(item) = doc.get("item").cloned() else {
            return Err(ConfigError::Edit {
                key: path.to_string(),
                message: "captured entry is empty".into(),
            });
        };
        let item = match item {
            Item::Table(mut t) => {
                t.set_implicit(false);
                Item::Table(t)
            }
            other => other,
        };
        edit::set_item(&mut self.doc, path, item)?;
        self.validated = None;
        self.mark(path);
        Ok(())
    }

    /// Validates the edited document as a whole and returns the config it would publish,
    /// without saving (lifecycle post-condition checks run on this).
    pub fn preview(&mut self) -> Result<&Config, ConfigError> {
        self.validate().map(|c| &*c)
    }

    /// Marks every secret field the document holds in plaintext, so the commit encrypts them
    /// in place (`warren config encrypt-secrets`, issue 35 §9); returns their key paths.
    pub fn encrypt_plaintext_secrets(&mut self) -> Result<Vec<KeyPath>, ConfigError> {
        let config = self.validate()?.clone();
        let paths = crate::plaintext::plaintext_secrets(&config, &self.doc);
        for path in &paths {
            self.mark(path);
        }
        Ok(paths)
    }

    /// The key paths changed so far.
    pub fn dirty(&self) -> &[KeyPath] {
        &self.dirty
    }

    /// Validates, encrypts new secret values, saves atomically and publishes the next
    /// generation. With nothing dirty, returns the current generation and writes nothing.
    pub fn commit(mut self) -> Result<CommitOutcome, ConfigError> {
        if self.dirty.is_empty() {
            return Ok(CommitOutcome {
                generation: self.base.generation,
                changed: Vec::new(),
                warnings: Vec::new(),
            });
        }
        if !self.store.shared.bound {
            return Err(ConfigError::Unbound);
        }
        let root = self.store.root().clone();
        self.validate()?;
        let Some((mut text, mut config)) = self.validated.take() else {
            return Err(ConfigError::Unbound);
        };
        let key_file = root.secret_key();
        let mut key = LazyKey::new(&key_file);
        let mut encrypted = false;
        for (secret_path, _) in config.secrets_mut() {
            let Ok(secret_path) = secret_path.parse::<KeyPath>() else {
                continue;
            };
            if !self.dirty.iter().any(|d| secret_path.starts_with(d)) {
                continue; // untouched secrets keep their ciphertext byte-identical
            }
            let Some(plain) = edit::get_str(&self.doc, &secret_path).map(str::to_owned) else {
                continue;
            };
            if plain.starts_with(ENC_PREFIX) || plain.is_empty() {
                continue;
            }
            let sealed = key.create_if_missing()?.encrypt(&plain)?;
            edit::set(&mut self.doc, &secret_path, Value::from(sealed))?;
            encrypted = true;
        }
        let path = root.config_file();
        if encrypted {
            text = self.doc.to_string();
            config = load::parse_config(&path, &text, &root.secret_key())?;
        }
        // Issue 35 §9: the .bak never keeps a plaintext secret this save takes out of the file.
        let scrubbed = match &self.base.disk {
            Some(old) => {
                crate::plaintext::scrubbed_backup(old, &self.base.config, &self.doc, &mut key)?
            }
            None => None,
        };
        let doc = std::mem::take(&mut self.doc);
        if !self.store.shared.swept.swap(true, Ordering::Relaxed) {
            atomic::sweep_stale_temps(&path);
        }
        let outcome = match scrubbed {
            None => atomic::write_durable(&path, text.as_bytes(), 0o600, CrashPoints::CONFIG)?,
            Some(backup) => {
                // The scrubbed copy replaces the .bak first; a crash before the live file is
                // replaced leaves the old file live (it still holds its own secrets).
                atomic::write_durable_no_backup(
                    &root.config_backup(),
                    backup.as_bytes(),
                    0o600,
                    CrashPoints::CONFIG_BACKUP,
                )?;
                atomic::write_durable_no_backup(&path, text.as_bytes(), 0o600, CrashPoints::CONFIG)?
            }
        };
        let generation = self.store.publish(config, doc, Some(text));
        Ok(CommitOutcome {
            generation,
            changed: self.dirty.iter().map(ToString::to_string).collect(),
            warnings: outcome.warnings,
        })
    }

    /// Applies `change` and validates the result; on any error the document is restored.
    fn try_edit(
        &mut self,
        path: &KeyPath,
        change: impl FnOnce(&mut DocumentMut) -> Result<(), ConfigError>,
    ) -> Result<(), ConfigError> {
        let checkpoint = self.checkpoint();
        self.validated = None;
        match change(&mut self.doc).and_then(|()| self.validate().map(|_| ())) {
            Ok(()) => {
                self.mark(path);
                Ok(())
            }
            Err(e) => {
                self.restore(checkpoint);
                Err(e)
            }
        }
    }

    /// The current document as text, cheaply when it is already known.
    fn checkpoint(&self) -> String {
        match (&self.validated, &self.base.disk) {
            (Some((text, _)), _) => text.clone(),
            (None, Some(disk)) if self.dirty.is_empty() => disk.clone(),
            _ => self.doc.to_string(),
        }
    }

    fn restore(&mut self, checkpoint: String) {
        self.validated = None;
        // The checkpoint was produced from a document, so it parses; fall back to the base.
        self.doc = checkpoint.parse().unwrap_or_else(|_| self.base.doc.clone());
    }

    /// Validates the edited document once; later calls reuse the result until the next edit.
    fn validate(&mut self) -> Result<&mut Config, ConfigError> {
        if self.validated.is_none() {
            let root = self.store.root();
            let text = self.doc.to_string();
            let config = load::parse_config(&root.config_file(), &text, &root.secret_key())
                .map_err(|e| match e {
                    // Line numbers of an edited document would not match the file; keep the key path.
                    ConfigError::Invalid { file, problems } => ConfigError::Invalid {
                        file,
                        problems: problems
                            .into_iter()
                            .map(|p| Problem {
                                position: None,
                                ..p
                            })
                            .collect(),
                    },
                    other => other,
                })?;
            self.store.run_checks(Some(&self.base.config), &config)?;
            self.validated = Some((text, config));
        }
        match self.validated.as_mut() {
            Some((_, config)) => Ok(config),
            None => Err(ConfigError::Unbound),
        }
    }

    fn mark(&mut self, path: &KeyPath) {
        if !self.dirty.contains(path) {
            self.dirty.push(path.clone());
        }
    }
}

/// Reads config.toml; a missing file is [`ConfigError::Missing`]. Reads do not update the
/// access time where the kernel allows it, so a stale check costs the next save no journal work.
fn read_config(root: &InstallRoot) -> Result<String, ConfigError> {
    let path = root.config_file();
    let open = |flags| {
        OpenOptions::new()
            .read(true)
            .custom_flags(flags)
            .open(&path)
    };
    let file = match open(libc::O_CLOEXEC | libc::O_NOATIME) {
        // O_NOATIME is refused (EPERM) on files owned by another user; read them normally.
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => open(libc::O_CLOEXEC),
        other => other,
    };
    let mut bytes = Vec::new();
    match file.and_then(|mut f| f.read_to_end(&mut bytes)) {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(ConfigError::Missing { path }),
        Err(cause) => return Err(ConfigError::Read { path, cause }),
    }
    String::from_utf8(bytes).map_err(|e| {
        // Where the first bad byte is: line and column of the text before it.
        let valid = e.utf8_error().valid_up_to();
        let before = String::from_utf8_lossy(&e.as_bytes()[..valid]);
        let problem = crate::error::Problem {
            key: None,
            position: Some(crate::error::line_col(&before, valid)),
            message: "invalid UTF-8 byte: a config file must be UTF-8 text".into(),
            hint: Some("re-save the file as UTF-8 (or restore config.toml.bak)".into()),
        };
        ConfigError::invalid(path, problem)
    })
}
