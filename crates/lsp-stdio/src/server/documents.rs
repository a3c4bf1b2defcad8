//! The documents a server has open: each kept equal to the file on disk
//! by content hash (open, full change, the least recently used closed
//! beyond the bound), re-synced when the file changed, and the wait for
//! the diagnostics of the documents a query's edits changed.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use lsp_seam::{LspError, ReadAccess};
use lsp_types::notification::{DidChangeTextDocument, DidCloseTextDocument, DidOpenTextDocument};
use lsp_types::{
    DidChangeTextDocumentParams, DidCloseTextDocumentParams, DidOpenTextDocumentParams,
    TextDocumentContentChangeEvent, TextDocumentIdentifier, TextDocumentItem, Url,
    VersionedTextDocumentIdentifier,
};

use super::{Failure, Server, lock};

/// One document the server has open.
#[derive(Debug)]
struct OpenDocument {
    version: i32,
    hash: u64,
    stamp: Option<(SystemTime, u64)>,
    last_used: u64,
    language_id: String,
    /// The first version the current content was sent as.
    since: i32,
    /// The version [`Server::resend_document`] sent with one more newline
    /// at the end, when it sent this content again.
    touch: Option<i32>,
}

/// The documents a server has open, and the clock that says which was
/// used least recently.
#[derive(Debug, Default)]
pub(super) struct OpenDocuments {
    docs: HashMap<PathBuf, OpenDocument>,
    clock: u64,
    /// How many `didOpen` notifications were sent to the server.
    opens_sent: u64,
    /// How many `didChange` notifications were sent to the server.
    changes_sent: u64,
}

/// Where a document stands among the notifications sent to its server:
/// how many `didOpen` and `didChange` were sent up to now, and the
/// document's version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SentSoFar {
    pub opens: u64,
    pub changes: u64,
    pub version: i32,
}

pub(super) fn content_hash(text: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    h.finish()
}

fn file_stamp(path: &Path) -> Option<(SystemTime, u64)> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len()))
}

/// A path as a `file://` URL.
pub(crate) fn path_url(path: &Path) -> Result<Url, LspError> {
    Url::from_file_path(path).map_err(|()| LspError::InvalidArgument {
        field: "path".into(),
        message: format!("{} is not an absolute path", path.display()),
    })
}

impl Server {
    /// Waits until the server published diagnostics for each `(path,
    /// version)` (a version at least as new), or `timeout` passes.
    pub async fn wait_diagnostics(
        &self,
        documents: &[(PathBuf, i32)],
        timeout: Duration,
    ) -> Result<(), Failure> {
        let started = tokio::time::Instant::now();
        let mut rx = self.shared.diagnostics.subscribe();
        for (path, version) in documents {
            let Ok(uri) = Url::from_file_path(path) else {
                continue;
            };
            let published = rx.wait_for(|d| match d.get(&uri).map(|p| p.version) {
                Some(Some(v)) => v >= *version,
                Some(None) => true,
                None => false,
            });
            match tokio::time::timeout_at(started + timeout, published).await {
                Ok(Ok(_)) => {}
                Ok(Err(_)) => return Err(Failure::Dead),
                Err(_) => {
                    return Err(Failure::Lsp(LspError::NotReady {
                        progress: Some(format!(
                            "{} is still processing the edited {}",
                            self.config.name,
                            path.display()
                        )),
                        waited_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                    }));
                }
            }
        }
        Ok(())
    }

    /// Whether `path` is open on the server.
    pub fn is_open(&self, path: &Path) -> bool {
        lock(&self.docs).docs.contains_key(path)
    }

    /// Makes the server's view of `path` equal to `text` (open or full
    /// change), closing the least recently used document beyond the bound.
    /// Returns the version sent, or `None` when the server had it already.
    pub fn sync_document(
        &self,
        path: &Path,
        text: &str,
        language_id: &str,
    ) -> Result<Option<i32>, Failure> {
        let hash = content_hash(text);
        let stamp = file_stamp(path);
        let mut docs = lock(&self.docs);
        let docs = &mut *docs;
        docs.clock += 1;
        let clock = docs.clock;
        if let Some(doc) = docs.docs.get_mut(path) {
            doc.last_used = clock;
            doc.stamp = stamp;
            if doc.hash == hash {
                return Ok(None);
            }
            doc.hash = hash;
            doc.touch = None;
            doc.version += 1;
            doc.since = doc.version;
            let version = doc.version;
            docs.changes_sent += 1;
            self.notify::<DidChangeTextDocument>(DidChangeTextDocumentParams {
                text_document: VersionedTextDocumentIdentifier {
                    uri: path_url(path)?,
                    version,
                },
                content_changes: vec![TextDocumentContentChangeEvent {
                    range: None,
                    range_length: None,
                    text: text.to_owned(),
                }],
            })?;
            return Ok(Some(version));
        }
        self.notify::<DidOpenTextDocument>(DidOpenTextDocumentParams {
            text_document: TextDocumentItem {
                uri: path_url(path)?,
                language_id: language_id.to_owned(),
                version: 1,
                text: text.to_owned(),
            },
        })?;
        docs.opens_sent += 1;
        docs.docs.insert(
            path.to_owned(),
            OpenDocument {
                version: 1,
                hash,
                stamp,
                last_used: clock,
                language_id: language_id.to_owned(),
                since: 1,
                touch: None,
            },
        );
        while docs.docs.len() > self.options.max_open_documents.max(1) {
            let Some(oldest) = docs
                .docs
                .iter()
                .min_by_key(|(_, d)| d.last_used)
                .map(|(p, _)| p.clone())
            else {
                break;
            };
            docs.docs.remove(&oldest);
            self.notify::<DidCloseTextDocument>(DidCloseTextDocumentParams {
                text_document: TextDocumentIdentifier {
                    uri: path_url(&oldest)?,
                },
            })?;
        }
        Ok(Some(1))
    }

    /// Sends `text` again as a new version of the open document `path`,
    /// after a version that differs from it by one more newline at the end:
    /// a server that skips the work for a change to the same text (clangd)
    /// or publishes nothing for a file whose diagnostics it already sent
    /// (gopls) computes and publishes the last version. Returns that
    /// version, or `None` when `path` is not open. Content sent again
    /// already is not sent a third time: what the server is computing for
    /// it would be thrown away, and a server slower than the caller's
    /// budget would never finish.
    pub fn resend_document(&self, path: &Path, text: &str) -> Result<Option<i32>, Failure> {
        let mut docs = lock(&self.docs);
        let docs = &mut *docs;
        let Some(doc) = docs.docs.get_mut(path) else {
            return Ok(None);
        };
        if doc.touch.is_some() && doc.hash == content_hash(text) {
            return Ok(Some(doc.version));
        }
        let uri = path_url(path)?;
        doc.touch = Some(doc.version + 1);
        for content in [format!("{text}\n"), text.to_owned()] {
            doc.version += 1;
            docs.changes_sent += 1;
            self.notify::<DidChangeTextDocument>(DidChangeTextDocumentParams {
                text_document: VersionedTextDocumentIdentifier {
                    uri: uri.clone(),
                    version: doc.version,
                },
                content_changes: vec![TextDocumentContentChangeEvent {
                    range: None,
                    range_length: None,
                    text: content,
                }],
            })?;
        }
        doc.hash = content_hash(text);
        Ok(Some(doc.version))
    }

    /// Closes the open document `path` and opens it again with `text` as
    /// the next version: a server that computes its own diagnostics of
    /// each open document publishes for that version once it has (it
    /// dropped them at the close), so a publication naming it was made
    /// after the server handled the reopening. Returns that version, or
    /// `None` when `path` is not open.
    pub fn reopen_document(&self, path: &Path, text: &str) -> Result<Option<i32>, Failure> {
        let mut docs = lock(&self.docs);
        let docs = &mut *docs;
        let Some(doc) = docs.docs.get_mut(path) else {
            return Ok(None);
        };
        let uri = path_url(path)?;
        doc.version += 1;
        doc.since = doc.version;
        doc.touch = None;
        doc.hash = content_hash(text);
        let (version, language_id) = (doc.version, doc.language_id.clone());
        self.notify::<DidCloseTextDocument>(DidCloseTextDocumentParams {
            text_document: TextDocumentIdentifier { uri: uri.clone() },
        })?;
        docs.opens_sent += 1;
        self.notify::<DidOpenTextDocument>(DidOpenTextDocumentParams {
            text_document: TextDocumentItem {
                uri,
                language_id,
                version,
                text: text.to_owned(),
            },
        })?;
        Ok(Some(version))
    }

    /// The versions of `path`'s current content on the server, when it is
    /// open: the first version it was sent as, and the version of the same
    /// text with one more newline that [`Server::resend_document`] sent
    /// (every version from the first on but that one is this content).
    pub fn content_versions(&self, path: &Path) -> Option<(i32, Option<i32>)> {
        lock(&self.docs).docs.get(path).map(|d| (d.since, d.touch))
    }

    /// `path`'s version and the `didOpen`/`didChange` notifications sent
    /// to the server so far, when it is open.
    pub fn sent_so_far(&self, path: &Path) -> Option<SentSoFar> {
        let docs = lock(&self.docs);
        docs.docs.get(path).map(|d| SentSoFar {
            opens: docs.opens_sent,
            changes: docs.changes_sent,
            version: d.version,
        })
    }

    /// Re-syncs open documents whose file changed on disk, and opens files
    /// the watcher saw change (unless the server follows
    /// `didChangeWatchedFiles` itself: `follows_watched_files`), so the
    /// next answer reflects the disk.
    /// Returns the documents sent and their versions. Files larger than
    /// `max_file_bytes`, and files `access` (the query's read policy)
    /// refuses, are left out (closed if open): the server never holds the
    /// text of a file the query could not read.
    pub fn refresh_documents(&self, access: &ReadAccess) -> Result<Vec<(PathBuf, i32)>, Failure> {
        let dirty: Vec<PathBuf> = std::mem::take(&mut *lock(&self.dirty));
        // Copied out, so that no file is looked at with the lock held.
        let open: Vec<(PathBuf, _, String)> = lock(&self.docs)
            .docs
            .iter()
            .map(|(p, d)| (p.clone(), d.stamp, d.language_id.clone()))
            .collect();
        let mut todo: Vec<(PathBuf, String)> = open
            .into_iter()
            .filter(|(p, stamp, _)| {
                file_stamp(p) != *stamp || dirty.contains(p) || access.check(p).is_err()
            })
            .map(|(p, _, lang)| (p, lang))
            .collect();
        // A file not open is opened for its change only for a server that
        // does not follow the watched-files notification itself.
        let open_changed = !self.config.follows_watched_files;
        for p in dirty {
            if open_changed
                && !todo.iter().any(|(q, _)| *q == p)
                && let Some(lang) = self.config.language_id(&p)
            {
                todo.push((p.clone(), lang.to_owned()));
            }
        }
        let mut sent = Vec::new();
        for (path, lang) in todo {
            match crate::text::read_capped(&path, self.options.max_file_bytes, access) {
                Ok(text) => {
                    if let Some(version) = self.sync_document(&path, &text, &lang)? {
                        sent.push((path, version));
                    }
                }
                Err(_) => {
                    let was_open = lock(&self.docs).docs.remove(&path).is_some();
                    if was_open {
                        self.notify::<DidCloseTextDocument>(DidCloseTextDocumentParams {
                            text_document: TextDocumentIdentifier {
                                uri: path_url(&path)?,
                            },
                        })?;
                    }
                }
            }
        }
        Ok(sent)
    }
}
