//! `ConfigStore`: the single in-process owner of config (SPEC CFG-1..5, STATE-1, STATE-19).
//!
//! - Readers take an `Arc<Snapshot>` (a brief read lock, never held across I/O).
//! - Every writer (CLI, gateway, RPC, lifecycle) goes through ONE [`WriteTxn`]: first the async
//!   mutex, then the cross-process lock file `data/config.lock` (so two `warren` processes never
//!   interleave a read-modify-write), then the sync `RwLock` only to publish. A transaction whose
//!   base no longer matches the file on disk is refused (stale read, CFG-2).
//! - Edits are dirty-path edits on the TOML document; commit validates the exact bytes it will
//!   write, encrypts new secret values, saves atomically (CFG-4/5) and publishes generation N+1.
//! - A store that was not loaded from a file refuses to save (see [`ConfigError::Unbound`]).

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::sync::{Arc, RwLock};

use toml_edit::{DocumentMut, Item, Table, Value};
use warren_core::AgentAlias;

use crate::atomic::{self, CrashPoints};
use crate::edit;
use crate::error::{ConfigError, Problem};
use crate::keypath::KeyPath;
use crate::load::{self, Parsed};
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
    live: RwLock<Arc<Snapshot>>,
    writer: tokio::sync::Mutex<()>,
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
        Ok(Self::new(root, true, Snapshot { generation: 1, config, doc, disk: Some(text) }))
    }

    /// An in-memory store (embedded defaults, tests). Every commit is refused with
    /// [`ConfigError::Unbound`]: such a config must never overwrite a file.
    pub fn unbound(root: InstallRoot, config: Config) -> Self {
        Self::new(root, false, Snapshot { generation: 1, config, doc: DocumentMut::new(), disk: None })
    }

    fn new(root: InstallRoot, bound: bool, snapshot: Snapshot) -> Self {
        Self {
            shared: Arc::new(Shared {
                root,
                bound,
                live: RwLock::new(Arc::new(snapshot)),
                writer: tokio::sync::Mutex::new(()),
            }),
        }
    }

    pub fn root(&self) -> &InstallRoot {
        &self.shared.root
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
        let guard = self.shared.writer.lock().await;
        let file_lock = if self.shared.bound {
            let root = self.shared.root.clone();
            Some(
                tokio::task::spawn_blocking(move || lock_config_file(&root))
                    .await
                    .map_err(|e| ConfigError::Lock {
                        path: self.shared.root.config_lock(),
                        source: io::Error::other(e.to_string()),
                    })??,
            )
        } else {
            None
        };
        self.begin(guard, file_lock)
    }

    /// Starts a write from synchronous code (the CLI). Must not be called on an async worker.
    pub fn write_blocking(&self) -> Result<WriteTxn<'_>, ConfigError> {
        let guard = self.shared.writer.blocking_lock();
        let file_lock = if self.shared.bound { Some(lock_config_file(&self.shared.root)?) } else { None };
        self.begin(guard, file_lock)
    }

    fn begin<'a>(
        &'a self,
        guard: tokio::sync::MutexGuard<'a, ()>,
        file_lock: Option<File>,
    ) -> Result<WriteTxn<'a>, ConfigError> {
        let base = self.snapshot();
        if let Some(loaded) = &base.disk {
            let now = read_config(&self.shared.root)?;
            if &now != loaded {
                return Err(ConfigError::Stale { path: self.shared.root.config_file(), generation: base.generation });
            }
        }
        Ok(WriteTxn { store: self, _guard: guard, _file_lock: file_lock, doc: base.doc.clone(), base, dirty: Vec::new() })
    }

    /// STATE-19: re-reads config.toml and publishes it as a new generation. On any error the
    /// running generation stays and the error is returned.
    pub async fn reload(&self) -> Result<u64, ConfigError> {
        let txn = self.write().await?;
        txn.store.reload_locked()
    }

    /// [`Self::reload`] for synchronous callers.
    pub fn reload_blocking(&self) -> Result<u64, ConfigError> {
        let _guard = self.shared.writer.blocking_lock();
        let _lock = if self.shared.bound { Some(lock_config_file(&self.shared.root)?) } else { None };
        self.reload_locked()
    }

    fn reload_locked(&self) -> Result<u64, ConfigError> {
        if !self.shared.bound {
            return Err(ConfigError::Unbound);
        }
        let root = &self.shared.root;
        let text = read_config(root)?;
        let Parsed { config, doc } = load::parse(&root.config_file(), &text, &root.secret_key())?;
        Ok(self.publish(config, doc, Some(text)))
    }

    fn publish(&self, config: Config, doc: DocumentMut, disk: Option<String>) -> u64 {
        let mut live = match self.shared.live.write() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        let generation = live.generation + 1;
        *live = Arc::new(Snapshot { generation, config, doc, disk });
        generation
    }
}

/// An open write: holds the config write lock until committed or dropped.
pub struct WriteTxn<'a> {
    store: &'a ConfigStore,
    _guard: tokio::sync::MutexGuard<'a, ()>,
    _file_lock: Option<File>,
    base: Arc<Snapshot>,
    doc: DocumentMut,
    dirty: Vec<KeyPath>,
}

impl WriteTxn<'_> {
    /// The config this write started from.
    pub fn base(&self) -> &Config {
        &self.base.config
    }

    /// Sets `path` to a TOML value.
    pub fn set(&mut self, path: &KeyPath, value: Value) -> Result<(), ConfigError> {
        edit::set(&mut self.doc, path, value)?;
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
            return self.try_set(path, as_string);
        };
        match self.try_set(path, literal) {
            Ok(()) => Ok(()),
            Err(first) => self.try_set(path, as_string).map_err(|_| first),
        }
    }

    /// Sets a secret field (stored encrypted on commit). Refuses paths that are not secrets.
    pub fn set_secret(&mut self, path: &KeyPath, plaintext: &str) -> Result<(), ConfigError> {
        let before = self.doc.clone();
        self.try_set(path, Value::from(plaintext))?;
        let mut preview = self.preview()?;
        let is_secret = preview.config.secrets_mut().iter().any(|(p, _)| p.parse::<KeyPath>().ok().as_ref() == Some(path));
        if !is_secret {
            self.doc = before;
            self.dirty.pop();
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
            self.mark(path);
        }
        Ok(removed)
    }

    /// Adds `[agents.<alias>]` with the given fields; refuses an alias that exists.
    pub fn add_agent(&mut self, alias: &AgentAlias, fields: &[(&str, &str)]) -> Result<(), ConfigError> {
        if self.base.config.agents.contains_key(alias.as_str())
            || edit::get(&self.doc, &KeyPath::default().push_key("agents").push_key(alias.as_str())).is_some()
        {
            return Err(ConfigError::Edit {
                key: format!("agents.{alias}"),
                message: format!("agent '{alias}' already exists"),
            });
        }
        let mut table = Table::new();
        for (k, v) in fields {
            table.insert(k, Item::Value(Value::from(*v)));
        }
        let path = KeyPath::default().push_key("agents").push_key(alias.as_str());
        let before = self.doc.clone();
        edit::set_item(&mut self.doc, &path, Item::Table(table))?;
        if let Err(e) = self.preview() {
            self.doc = before;
            return Err(e);
        }
        self.mark(&path);
        Ok(())
    }

    /// The key paths changed so far.
    pub fn dirty(&self) -> &[KeyPath] {
        &self.dirty
    }

    /// Validates, encrypts new secret values, saves atomically and publishes the next
    /// generation. With nothing dirty, returns the current generation and writes nothing.
    pub fn commit(mut self) -> Result<CommitOutcome, ConfigError> {
        if self.dirty.is_empty() {
            return Ok(CommitOutcome { generation: self.base.generation, changed: Vec::new(), warnings: Vec::new() });
        }
        if !self.store.shared.bound {
            return Err(ConfigError::Unbound);
        }
        let root = self.store.root().clone();
        let mut preview = self.preview()?;
        let key_file = root.secret_key();
        let mut key = LazyKey::new(&key_file);
        for (secret_path, _) in preview.config.secrets_mut() {
            let Ok(secret_path) = secret_path.parse::<KeyPath>() else { continue };
            if !self.dirty.iter().any(|d| secret_path.starts_with(d)) {
                continue; // untouched secrets keep their ciphertext byte-identical
            }
            let Some(plain) = edit::get_str(&self.doc, &secret_path).map(str::to_owned) else { continue };
            if plain.starts_with(ENC_PREFIX) || plain.is_empty() {
                continue;
            }
            let sealed = key.create_if_missing()?.encrypt(&plain)?;
            edit::set(&mut self.doc, &secret_path, Value::from(sealed))?;
        }
        let text = self.doc.to_string();
        let path = root.config_file();
        let Parsed { config, doc } = load::parse(&path, &text, &root.secret_key())?;
        let outcome = atomic::write_durable(&path, text.as_bytes(), 0o600, CrashPoints::CONFIG)?;
        let generation = self.store.publish(config, doc, Some(text));
        Ok(CommitOutcome {
            generation,
            changed: self.dirty.iter().map(ToString::to_string).collect(),
            warnings: outcome.warnings,
        })
    }

    fn try_set(&mut self, path: &KeyPath, value: Value) -> Result<(), ConfigError> {
        let before = self.doc.clone();
        edit::set(&mut self.doc, path, value)?;
        match self.preview() {
            Ok(_) => {
                self.mark(path);
                Ok(())
            }
            Err(e) => {
                self.doc = before;
                Err(e)
            }
        }
    }

    fn preview(&self) -> Result<Parsed, ConfigError> {
        let root = self.store.root();
        let text = self.doc.to_string();
        load::parse(&root.config_file(), &text, &root.secret_key()).map_err(|e| match e {
            // Line numbers of an edited document would not match the file; keep the key path.
            ConfigError::Invalid { file, problems } => ConfigError::Invalid {
                file,
                problems: problems.into_iter().map(|p| Problem { position: None, ..p }).collect(),
            },
            other => other,
        })
    }

    fn mark(&mut self, path: &KeyPath) {
        if !self.dirty.contains(path) {
            self.dirty.push(path.clone());
        }
    }
}

/// Reads config.toml; a missing file is [`ConfigError::Missing`].
fn read_config(root: &InstallRoot) -> Result<String, ConfigError> {
    let path = root.config_file();
    match fs::read_to_string(&path) {
        Ok(text) => Ok(text),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(ConfigError::Missing { path }),
        Err(source) => Err(ConfigError::Read { path, source }),
    }
}

/// Takes the cross-process config write lock (blocking until other writers finish).
fn lock_config_file(root: &InstallRoot) -> Result<File, ConfigError> {
    let path = root.config_lock();
    let lock_err = |source| ConfigError::Lock { path: path.clone(), source };
    fs::create_dir_all(root.data_dir()).map_err(lock_err)?;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path)
        .map_err(lock_err)?;
    file.lock().map_err(lock_err)?;
    Ok(file)
}
