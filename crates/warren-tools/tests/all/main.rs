//! The crate's integration tests, linked into one binary (one module per suite).

mod common;
mod disk_quota;
mod escape_files;
mod escape_git_prepass_cache;
mod escape_git_programs;
mod escape_git_repository;
mod escape_shell;
mod git_operations;
mod gitkit;
mod memory_tools;
mod refname_git;
mod sandbox_owner;
