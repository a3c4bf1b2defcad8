//! Foreground commands (`bash` and `subagent` calls that wait for their
//! result) are counted per owner and capped, as background jobs are.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use error_code::Code;
use jobs::{JobError, JobRegistry, JobsConfig, Owner};
use pretty_assertions::assert_eq;

#[tokio::test]
async fn foreground_commands_per_owner_are_capped_and_freed_on_drop() {
    let registry = JobRegistry::new(JobsConfig {
        max_foreground_per_owner: 2,
        ..JobsConfig::default()
    });
    let owner = Owner::new("t");
    let other = Owner::new("other");
    let first = registry.begin_foreground(&owner).unwrap();
    let _second = registry.begin_foreground(&owner).unwrap();
    assert_eq!(registry.foreground_running(&owner), 2);

    let refused = registry.begin_foreground(&owner).unwrap_err();
    assert_eq!(
        refused,
        JobError::ForegroundLimit {
            running: 2,
            limit: 2
        }
    );
    assert_eq!(refused.code(), Code::JobLimit);
    assert!(refused.retryable());
    assert_eq!(
        refused.to_string(),
        "2 of your bash/subagent calls are already running in the foreground, the limit is 2: \
         wait for one to return, or start this one with run_in_background (a job you read with \
         job_output), then retry"
    );

    // Another owner has a limit of its own.
    let _theirs = registry.begin_foreground(&other).unwrap();

    // A finished command frees its place.
    drop(first);
    assert_eq!(registry.foreground_running(&owner), 1);
    let _third = registry.begin_foreground(&owner).unwrap();
    assert_eq!(registry.foreground_running(&owner), 2);
}
