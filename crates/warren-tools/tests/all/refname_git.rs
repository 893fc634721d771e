//! The branch-name rules of `git_operations` agree with the real `git check-ref-format --branch`
//! (GIT-10): every name Warren accepts, git accepts, and every name git refuses, Warren refuses.
//! Names are generated from an alphabet dense in the characters the rules are about.

use std::process::Command;

use proptest::prelude::*;
use warren_tools::refname::check_branch_name;

fn git_accepts(name: &str) -> bool {
    Command::new("git")
        .args(["check-ref-format", "--branch", name])
        .current_dir(std::env::temp_dir())
        .output()
        .is_ok_and(|o| o.status.success())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn warren_accepts_only_what_git_accepts_git10(
        name in "[-a./@{}~^:?*\\[\\\\ lockHEAD]{1,12}"
    ) {
        let ours = check_branch_name(&name).is_ok();
        let git = git_accepts(&name);
        // Warren may be stricter only where it refuses on purpose: a leading '-', "@{", and "@"
        // alone (git accepts refs/heads/@, but `@` means HEAD in every revision argument).
        if ours {
            prop_assert!(git, "Warren accepts {name:?}, git refuses it");
        } else if git {
            prop_assert!(
                name.starts_with('-') || name.contains("@{") || name == "@",
                "git accepts {name:?}, Warren refuses it: {:?}",
                check_branch_name(&name)
            );
        }
    }
}
