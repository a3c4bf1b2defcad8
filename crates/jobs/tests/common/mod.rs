//! What the jobs tests share: a registry, starting a shell command, and
//! waiting (bounded) for a job to settle.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use jobs::{
    CommandProducer, CommandSpec, JobInfo, JobRegistry, JobStarted, JobsConfig, Owner, StartOptions,
};

/// Generous bound that only catches hangs.
pub const HANG: Duration = Duration::from_secs(30);

/// A registry with the defaults, in a process that reaps its orphans.
pub fn registry() -> JobRegistry {
    let _ = process_tree::become_subreaper();
    JobRegistry::new(JobsConfig::default())
}

/// Starts `spec` as a background job of `owner`.
pub async fn start_spec(registry: &JobRegistry, owner: &Owner, spec: CommandSpec) -> JobStarted {
    registry
        .start(owner, CommandProducer::boxed(spec), StartOptions::default())
        .await
        .unwrap()
}

/// Starts `bash -c command` as a background job of `owner`.
pub async fn start_shell(registry: &JobRegistry, owner: &Owner, command: &str) -> JobStarted {
    start_spec(registry, owner, CommandSpec::shell(command)).await
}

/// Waits (bounded) until the job settles; returns its info as of then.
pub async fn settled(registry: &JobRegistry, owner: &Owner, id: &str) -> JobInfo {
    let begun = Instant::now();
    loop {
        let read = registry
            .output(owner, id, None, None, Duration::from_secs(5))
            .await
            .unwrap();
        if read.status.is_settled() {
            return registry.info(owner, id).unwrap();
        }
        assert!(begun.elapsed() < HANG, "job {id} never settled");
    }
}
