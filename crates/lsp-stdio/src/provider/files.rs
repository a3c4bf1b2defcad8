//! The files an answer shows lines of or lists: each read at most once
//! per query, and none the query's read policy refuses.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use lsp_seam::{LspError, ReadAccess, ReadDenied};
use lsp_types::{Position, Url};

use crate::text::{self, Encoding};

/// Largest file read to render results.
const MAX_FILE_BYTES: u64 = 8 << 20;

/// Reads files at most once per query, and none the query may not read
/// (for the lines an answer shows).
pub(super) struct Files {
    access: ReadAccess,
    texts: HashMap<PathBuf, Result<Option<Arc<String>>, ReadDenied>>,
}

/// Asks the query's read policy about each file at most once (for the
/// locations an answer lists without reading them).
pub(super) struct Permits {
    access: ReadAccess,
    checked: HashMap<PathBuf, Result<(), ReadDenied>>,
}

impl Permits {
    pub(super) fn new(access: &ReadAccess) -> Self {
        Self {
            access: access.clone(),
            checked: HashMap::new(),
        }
    }

    /// Whether the query may read `path`, without reading it.
    pub(super) fn permit(&mut self, path: &Path) -> Result<(), ReadDenied> {
        let access = &self.access;
        self.checked
            .entry(path.to_owned())
            .or_insert_with(|| access.check(path))
            .clone()
    }
}

impl Files {
    pub(super) fn new(access: &ReadAccess) -> Self {
        Self {
            access: access.clone(),
            texts: HashMap::new(),
        }
    }

    /// The text of `path`: `Err` when the query may not read it (nothing
    /// was read), `None` when it cannot be read as text (missing, too
    /// big, not UTF-8).
    pub(super) fn load(&mut self, path: &Path) -> Result<Option<Arc<String>>, ReadDenied> {
        let access = &self.access;
        self.texts
            .entry(path.to_owned())
            .or_insert_with(|| match path.canonicalize() {
                // Nothing there, and the policy not asked yet: still
                // refused when it refuses where the file would be.
                Err(_) => access.check(path).map(|()| None),
                Ok(real) => match text::read_resolved(path, &real, MAX_FILE_BYTES, access) {
                    Ok(text) => Ok(Some(Arc::new(text))),
                    Err(LspError::ReadDenied(denied)) => Err(denied),
                    // Not readable as text; the policy let it be read.
                    Err(_) => Ok(None),
                },
            })
            .clone()
    }

    pub(super) fn line(&mut self, path: &Path, index: u32) -> Option<String> {
        let text = self.load(path).ok()??;
        text::line_at(&text, index as usize).map(str::to_owned)
    }

    /// A server position in `path` as (1-based line, 1-based column).
    pub(super) fn position(
        &mut self,
        path: &Path,
        pos: Position,
        encoding: Encoding,
    ) -> (u32, u32) {
        let column = match self.line(path, pos.line) {
            Some(line) => text::from_server_offset(&line, pos.character, encoding),
            None => pos.character as usize,
        };
        (
            pos.line.saturating_add(1),
            u32::try_from(column).unwrap_or(u32::MAX).saturating_add(1),
        )
    }
}

pub(super) fn url_path(url: &Url) -> PathBuf {
    url.to_file_path()
        .unwrap_or_else(|()| PathBuf::from(url.as_str()))
}
