//! The registry over the in-memory providers: the conformance suite, fault
//! injection over every mutation, and power loss at every flush boundary.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use pretty_assertions::assert_eq;
use workspace::testing::{
    MemoryStore, PowerLossDomain, Projection, fault_injection_suite, header, pending_marker,
    project, rollback_combinations_suite, run_conformance, sid,
};
use workspace::{DomainImage, Registry, SessionPersistence, StorageDomain, WorkspaceError};

#[test]
fn conformance_in_memory() {
    run_conformance(MemoryStore::new);
}

#[test]
fn fault_injection_over_every_mutation_in_memory() {
    fault_injection_suite(MemoryStore::new);
}

#[test]
fn rollback_for_every_write_and_rollback_failure_combination() {
    rollback_combinations_suite(MemoryStore::new);
}

/// A scripted history of mutations; each returns the projection expected after it.
fn history(
    r: &mut Registry<PowerLossDomain, workspace::testing::MemorySessions>,
    d: &[std::path::PathBuf],
    acked: &mut Vec<Projection>,
) -> Result<(), WorkspaceError> {
    let known: Vec<_> = (1..=3).map(sid).collect();
    let a = r.create(&d[0], None)?.id;
    acked.push(project(r, &known));
    let b = r.create(&d[1], Some("b"))?.id;
    acked.push(project(r, &known));
    for n in 1..=2 {
        r.record_session(&header(n, Some(&d[0]), n as i64))?;
        r.attach_session(a, sid(n))?;
        acked.push(project(r, &known));
    }
    r.insert_session_before(a, sid(1), Some(sid(2)))?;
    acked.push(project(r, &known));
    r.insert_before(a, None)?;
    acked.push(project(r, &known));
    r.set_title(b, "renamed")?;
    acked.push(project(r, &known));
    r.archive_session(sid(1))?;
    acked.push(project(r, &known));
    r.detach_session(a, sid(2))?;
    acked.push(project(r, &known));
    r.delete(b)?;
    acked.push(project(r, &known));
    r.create(&d[2], None)?;
    acked.push(project(r, &known));
    r.delete(a)?;
    acked.push(project(r, &known));
    Ok(())
}

#[test]
fn power_loss_at_every_flush_boundary() {
    let tmp = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(tmp.path()).unwrap();
    let d: Vec<_> = (0..3)
        .map(|i| {
            let p = base.join(format!("d{i}"));
            std::fs::create_dir(&p).unwrap();
            p
        })
        .collect();
    let known: Vec<_> = (1..=3).map(sid).collect();
    let mut cut = 1;
    loop {
        let durable = Arc::new(Mutex::new(DomainImage::default()));
        let sessions = MemoryStore::new();
        let mut r = Registry::open(
            PowerLossDomain::new(durable.clone(), cut),
            sessions.sessions(),
        );
        let mut acked = Vec::new();
        let completed = match &mut r {
            Ok(r) => history(r, &d, &mut acked).is_ok(),
            Err(_) => false,
        };
        let lost = r.as_ref().map(|r| r.order().is_empty()).is_ok();
        drop((r, lost));
        // Power comes back: start from the durable image only.
        let restored = MemoryStore::new();
        let mut dom = restored.domain();
        let image = durable.lock().unwrap().clone();
        if let Some(g) = image.global.clone() {
            dom.write(workspace::DomainWrite::PutGlobal(g)).unwrap();
        }
        for (table, rows) in &image.tables {
            for (key, value) in rows {
                dom.write(workspace::DomainWrite::PutRow {
                    table: table.clone(),
                    key: key.clone(),
                    value: value.clone(),
                })
                .unwrap();
            }
        }
        let mut s = restored.sessions();
        for h in sessions.sessions().list_headers().unwrap() {
            s.put_header(&h).unwrap();
        }
        let r = Registry::open(restored.domain(), restored.sessions()).unwrap();
        let after = project(&r, &known);
        drop(r);
        assert_eq!(
            pending_marker(&restored.image()),
            None,
            "marker left after power loss at flush {cut}"
        );
        let last_acked = acked.last().cloned().unwrap_or(Projection {
            workspaces: vec![],
            archived: vec![],
        });
        if completed {
            assert_eq!(
                after, last_acked,
                "power loss at flush {cut} after the whole history"
            );
            break;
        }
        // Everything acknowledged is there; the interrupted mutation is wholly there or wholly absent.
        let next = {
            let mut replay = Vec::new();
            let full = MemoryStore::new();
            let durable = Arc::new(Mutex::new(DomainImage::default()));
            let mut r =
                Registry::open(PowerLossDomain::new(durable, usize::MAX), full.sessions()).unwrap();
            history(&mut r, &d, &mut replay).unwrap();
            replay.get(acked.len()).cloned()
        };
        assert!(
            after == last_acked || Some(&after) == next.as_ref(),
            "power loss at flush {cut}: {after:?} is neither {last_acked:?} nor {next:?}"
        );
        cut += 1;
        assert!(cut < 200);
    }
}
