//! The command line (clap). Only argument shapes live here; behaviour is in `commands`.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "warren",
    version,
    about = "Warren: a self-hosted multi-agent AI runtime"
)]
pub struct Cli {
    /// Install root (default: $WARREN_HOME, else ~/.warren)
    #[arg(long, global = true, value_name = "DIR")]
    pub config_dir: Option<PathBuf>,
    /// Machine-readable JSON output for listing commands
    #[arg(long, global = true)]
    pub json: bool,
    /// More log detail on stderr (-v debug, -vv trace)
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create the install layout and a commented starter config with one agent, `main`
    Init,
    /// Run the daemon (one per install root; SIGHUP reloads config, SIGTERM/SIGINT stop it)
    Daemon,
    /// Read, change and check config.toml
    #[command(subcommand)]
    Config(ConfigCommand),
    /// List and add agents
    #[command(subcommand)]
    Agents(AgentsCommand),
    /// List, read, search and migrate chat sessions
    #[command(subcommand)]
    Sessions(SessionsCommand),
    /// Inspect and prune an agent's memory (its own rows, and for recall its grants)
    #[command(subcommand)]
    Memory(MemoryCommand),
    /// Install root, config generation and whether a daemon runs
    Status,
    /// Inspect an agent's effective permissions
    #[command(subcommand)]
    Security(SecurityCommand),
    /// Run one tool as an agent would, under its policy and sandbox
    #[command(subcommand)]
    Tools(ToolsCommand),
    /// Talk to an agent: one turn with -m, else a line REPL (Ctrl-C cancels a turn, Ctrl-D exits)
    Agent {
        /// The agent (default: the default agent)
        #[arg(short = 'a', long = "agent", value_name = "ALIAS")]
        alias: Option<String>,
        /// Run one turn with this message and exit
        #[arg(short, long)]
        message: Option<String>,
        /// The session to continue (default: Agent-<alias>-cli, or an existing cli-<alias> of the agent)
        #[arg(long, value_name = "KEY")]
        session: Option<String>,
    },
    /// Serve an agent to an editor (Zed, Neovim, Emacs) over the Agent Client Protocol on stdio
    Acp {
        /// The agent (default: the default agent)
        #[arg(short = 'a', long = "agent", value_name = "ALIAS")]
        alias: Option<String>,
        /// Instead of serving: end the agent's stored ACP sessions (refused while a `warren acp`
        /// of the agent runs); an ended session can no longer be loaded, and no longer blocks
        /// `agents delete`
        #[arg(long)]
        end_sessions: bool,
    },
    /// Scheduled jobs: add, list, show, run, pause, resume, remove, and their runs
    #[command(subcommand)]
    Cron(CronCommand),
    /// Chat channels ([channels.telegram.<name>]): list, status, senders, allow, block, test
    #[command(subcommand)]
    Channels(crate::commands::channels::ChannelsCommand),
    /// Background runs (cron jobs) registered in the control plane: list, cancel
    #[command(subcommand)]
    Runs(RunsCommand),
    /// SOPs (shared/sops/<name>.toml): list, show, validate, run, runs, status, approve, deny, cancel
    #[command(subcommand)]
    Sop(crate::commands::sop::SopCommand),
    /// An agent's MCP servers (started in its sandbox): list, test
    #[command(subcommand)]
    Mcp(crate::commands::mcp::McpCommand),
    /// Shared skill bundles (shared/skills/<bundle>/SKILL.md): list, show
    #[command(subcommand)]
    Skills(crate::commands::skills::SkillsCommand),
    /// Show the cost ledger (data/state/costs.jsonl), totalled per agent and model
    Costs {
        #[arg(long, value_name = "ALIAS")]
        agent: Option<String>,
        /// Only records at or after DATE (YYYY-MM-DD, UTC) or an RFC 3339 time
        #[arg(long, value_name = "DATE")]
        since: Option<String>,
    },
    /// Show the runtime trace (data/state/runtime-trace.jsonl)
    Logs {
        /// Keep printing new events
        #[arg(short, long)]
        follow: bool,
        #[arg(long, value_name = "ALIAS")]
        agent: Option<String>,
    },
    /// Ask the running daemon for a one-time pairing code (shown here only, never logged)
    Pair {
        /// Pair a device named NAME directly and print its token (no code, no lockout: proven
        /// by the admin key of data/gateway.json, which only the operator can read)
        #[arg(long, value_name = "NAME")]
        device: Option<String>,
    },
    /// List and revoke the gateway's paired bearer tokens
    #[command(subcommand)]
    Tokens(TokensCommand),
    /// Back up the install while it runs (`backup verify SRC` checks a backup)
    Backup(BackupArgs),
    /// Restore a backup (verified first) into the install root or --to DIR
    Restore {
        /// The backup directory
        src: PathBuf,
        /// Restore here instead of the install root
        #[arg(long, value_name = "DIR")]
        to: Option<PathBuf>,
        /// Restore over a non-empty root: it is moved aside first (kept, never deleted)
        #[arg(long)]
        force: bool,
    },
    /// Schema versions, pending migrations, pre-migration snapshots and disk use
    Doctor,
    /// Print a shell completion script
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// `warren backup [DEST] [--encrypt]` and `warren backup verify SRC`.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct BackupArgs {
    #[command(subcommand)]
    pub command: Option<BackupCommand>,
    /// The backup directory to create (default: ~/warren-backups/<UTC time>)
    pub dest: Option<PathBuf>,
    /// Encrypt every file with a passphrase ($WARREN_BACKUP_PASSPHRASE, else asked)
    #[arg(long)]
    pub encrypt: bool,
    /// Leave out (with a warning) the workspace files of an agent using more than MB
    /// megabytes on disk; 0 = no cap
    #[arg(long, value_name = "MB", default_value_t = warren_admin::backup::cap::DEFAULT_MAX_AGENT_MB)]
    pub max_agent_mb: u64,
}

#[derive(Debug, Subcommand)]
pub enum BackupCommand {
    /// Check a backup: every digest, every database (integrity_check), and that its key
    /// decrypts the secrets of its config
    Verify { src: PathBuf },
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Print the path of config.toml
    Path,
    /// Print the effective value of KEY (defaults included; secrets show as [redacted])
    Get { key: String },
    /// Set KEY to VALUE, keeping the rest of the file as it is
    Set {
        key: String,
        /// A TOML literal (8080, true, ["a","b"]) or plain text; with --secret, read from stdin when omitted
        value: Option<String>,
        /// KEY is a secret: store it encrypted (VALUE may come from stdin, out of shell history)
        #[arg(long)]
        secret: bool,
    },
    /// Check config.toml and report every problem with its key and line (and secrets written
    /// in plaintext, by key only)
    Validate,
    /// Encrypt every secret written in plaintext in config.toml, in place (config.toml.bak
    /// keeps no plaintext copy)
    EncryptSecrets,
}

#[derive(Debug, Subcommand)]
pub enum TokensCommand {
    /// Paired devices: id (prefix of the token hash), name, created, last seen
    List,
    /// Revoke a device's token (by id from `tokens list`); a running daemon reloads
    Revoke { id: String },
}

#[derive(Debug, Subcommand)]
pub enum AgentsCommand {
    /// List configured agents
    List,
    /// Add an agent (its workspace is created when it first starts)
    Add {
        alias: String,
        #[arg(long)]
        provider: Option<String>,
        #[arg(long)]
        model: Option<String>,
        #[arg(long, value_name = "PROFILE")]
        risk_profile: Option<String>,
    },
    /// Rename an agent: config references, workspace, memory, sessions, ACP sessions, costs
    Rename { old: String, new: String },
    /// Delete an agent into data/agents/_deleted/ (preview without --yes)
    Delete {
        alias: String,
        /// Show what would happen and change nothing
        #[arg(long)]
        dry_run: bool,
        /// Apply the delete
        #[arg(long)]
        yes: bool,
    },
    /// Restore a deleted agent from its archive (a path or a name under data/agents/_deleted/)
    Restore {
        archive: String,
        /// Restore under another alias
        #[arg(long = "as", value_name = "NEW_ALIAS")]
        as_alias: Option<String>,
    },
    /// Finish interrupted renames/deletes/restores from their journal
    Resume,
}

#[derive(Debug, Subcommand)]
pub enum SecurityCommand {
    /// Print the effective policy and the active sandbox backend of an agent
    Posture { alias: String },
    /// Try to escape the sandbox of ALIAS (every agent when omitted) on this kernel: network of
    /// each protocol, host sockets, /proc, survivors, outside and sibling files, root, exec.
    /// Prints held/ESCAPE per row with the layer that stopped it; exits 1 on any escape
    Selftest { alias: Option<String> },
    /// Show ALIAS's network egress: its allowlist ([agents.ALIAS.network] allow), the secrets
    /// it may use at each host ([secrets.NAME] hosts) and its recent connections
    Egress { alias: String },
}

#[derive(Debug, Subcommand)]
pub enum ToolsCommand {
    /// List the tools of an agent
    List { alias: String },
    /// Run TOOL for agent ALIAS with JSON arguments; prints the result as JSON
    Run {
        alias: String,
        tool: String,
        /// The arguments object, e.g. '{"path": "notes.md"}'
        args: String,
        /// Approve the call as the operator (for commands that need approval)
        #[arg(long)]
        approve: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum SessionsCommand {
    /// Import legacy data/sessions/*.jsonl into sessions.db (receipts, archives, crash-safe)
    Migrate {
        /// Show what would be imported; change nothing
        #[arg(long)]
        dry_run: bool,
    },
    /// List sessions, most recently active first
    List,
    /// Print a session's details and messages
    Show {
        key: String,
        /// Only the newest N messages
        #[arg(long, value_name = "N")]
        last: Option<usize>,
    },
    /// Find messages containing every word of TEXT
    Search {
        text: String,
        #[arg(long, default_value_t = 20)]
        limit: usize,
    },
    /// Delete a session and its messages (only if it belongs to ALIAS)
    Delete {
        key: String,
        #[arg(long, value_name = "ALIAS")]
        agent: String,
    },
    /// Append one message (for scripts; the session is created if needed)
    Append {
        key: String,
        /// system, user, assistant or tool
        #[arg(long, default_value = "user")]
        role: String,
        #[arg(long, value_name = "ALIAS")]
        agent: Option<String>,
        text: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum MemoryCommand {
    /// List the agent's own memories, newest first
    List {
        #[command(flatten)]
        agent: AgentArg,
        /// Only this category (exact name)
        #[arg(long)]
        category: Option<String>,
        #[arg(long, default_value_t = 50)]
        limit: usize,
        #[arg(long, default_value_t = 0)]
        offset: usize,
    },
    /// Search as the agent would: its own memories and what its grants allow
    Recall {
        #[command(flatten)]
        agent: AgentArg,
        /// Keywords ("word*" for a prefix; empty or "*" for the most recent)
        query: String,
        #[arg(long, default_value_t = 10)]
        limit: usize,
    },
    /// Print one of the agent's memories in full, with its version and who wrote it
    Show {
        #[command(flatten)]
        agent: AgentArg,
        key: String,
    },
    /// Store a memory for the agent as the operator (trust "operator")
    Store {
        #[command(flatten)]
        agent: AgentArg,
        key: String,
        content: String,
        #[arg(long)]
        category: Option<String>,
        /// Store only if the key is at this version now (0: only if it does not exist)
        #[arg(long, value_name = "VERSION")]
        expected_version: Option<u64>,
    },
    /// Delete one of the agent's own memories (the text is kept in its history for undo)
    Forget {
        #[command(flatten)]
        agent: AgentArg,
        key: String,
    },
    /// Every kept version of one of the agent's memories, newest first
    History {
        #[command(flatten)]
        agent: AgentArg,
        key: String,
    },
    /// Bring back an earlier version of a memory (default: the one before the current; also
    /// brings back a forgotten key)
    Undo {
        #[command(flatten)]
        agent: AgentArg,
        key: String,
        /// The version to restore (see `warren memory history`)
        #[arg(long, value_name = "VERSION")]
        to: Option<u64>,
    },
}

/// `warren cron` (STATE-9).
// Parsed once per process: the size of `Add` does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum CronCommand {
    /// Add a job: an agent turn (--message) or a shell command (--command) on a schedule
    Add {
        /// The job's name (letters, digits, '-', '_')
        name: String,
        /// The agent that runs it
        #[arg(long, value_name = "ALIAS")]
        agent: warren_core::AgentAlias,
        /// A 5- or 6-field cron expression
        #[arg(long = "cron", value_name = "EXPR", conflicts_with_all = ["every", "at"])]
        cron: Option<String>,
        /// Time zone of --cron (IANA name; default UTC)
        #[arg(long, value_name = "ZONE", requires = "cron")]
        tz: Option<String>,
        /// An interval: 30s, 15m, 2h, 1d
        #[arg(long, value_name = "DURATION", conflicts_with = "at")]
        every: Option<String>,
        /// One run at an RFC 3339 time
        #[arg(long, value_name = "TIME")]
        at: Option<String>,
        /// The message of the agent turn
        #[arg(long, value_name = "TEXT", conflicts_with = "command")]
        message: Option<String>,
        /// A shell command run as the agent's shell tool (its policy, sandbox, approvals)
        #[arg(long, value_name = "CMD")]
        command: Option<String>,
        /// A session the agent owns (default: an isolated session per run)
        #[arg(long, value_name = "KEY")]
        session: Option<String>,
        /// Per-run budget in USD
        #[arg(long, value_name = "X")]
        budget_usd: Option<f64>,
        /// Per-day budget in USD (UTC day)
        #[arg(long, value_name = "X")]
        daily_budget_usd: Option<f64>,
        /// Missed fire times after downtime: skip (default) or once
        #[arg(long, value_name = "POLICY")]
        catch_up: Option<String>,
        /// Deliver each run's result to this URL (https, or http to localhost)
        #[arg(long, value_name = "URL")]
        webhook: Option<String>,
    },
    /// Jobs with their schedule, next run, state and pause reason
    List,
    /// One job with its last runs
    Show { name: String },
    /// Run a job now (claims the same lock as scheduled runs)
    Run { name: String },
    /// Stop firing a job
    Pause { name: String },
    /// Fire a paused job again (clears its failure count)
    Resume { name: String },
    /// Remove a runtime job and its run history
    Remove { name: String },
    /// A job's runs, newest first
    Runs {
        name: String,
        /// How many runs to show, newest first
        #[arg(long, value_name = "N", default_value_t = 20)]
        limit: u32,
    },
}

/// `warren runs` (STATE-11).
#[derive(Debug, Subcommand)]
pub enum RunsCommand {
    /// Background runs, newest first
    List {
        /// Only this agent's runs
        #[arg(long, value_name = "ALIAS")]
        agent: Option<String>,
        /// How many runs to show, newest first
        #[arg(long, value_name = "N", default_value_t = 50)]
        limit: u32,
    },
    /// Ask a running background run to stop
    Cancel { id: String },
}

#[derive(Debug, clap::Args)]
pub struct AgentArg {
    /// The agent (default: the default agent)
    #[arg(long, value_name = "ALIAS")]
    pub agent: Option<String>,
}
