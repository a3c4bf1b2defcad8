//! `dsh ui --open`: hands a browser the page's sign-in link through a
//! file only this user can read, never on a command line
//! ([`open_in_browser`]).

use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// Why the page could not be opened in a browser.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The directory of the launch files is not usable.
    #[error("{0}")]
    Directory(crate::paths::PathsError),
    /// The launch file could not be written.
    #[error("cannot write {}: {error}", file.display())]
    Write {
        /// The file.
        file: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// The launch file's path could not be made absolute.
    #[error("cannot make {} absolute: {error}", path.display())]
    Absolute {
        /// The path.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// The launch file's path has no `file://` URL.
    #[error("{} cannot be named by a file:// URL", path.display())]
    NoFileUrl {
        /// The absolute path.
        path: PathBuf,
    },
    /// The launch file could not be made or named; the person opens the
    /// URL.
    #[error("{0}; open the URL yourself")]
    Launch(Box<OpenError>),
    /// The browser could not be started; the person opens the URL.
    #[error("could not start `{browser}` ({error}); open the URL yourself")]
    Browser {
        /// The browser's command.
        browser: String,
        /// Why.
        error: std::io::Error,
    },
}

/// Writes a page that moves on to the sign-in link `url` into a file only
/// this user can read (0600, in `ui-open/` under `runtime_dir`, made
/// 0700), for a browser to open: the link never appears on the browser's
/// command line, which every user of the machine can read (`ps`). Launch
/// files of earlier runs whose links have expired are removed first.
/// Returns the file.
pub fn launch_file(runtime_dir: &Path, url: &str) -> Result<PathBuf, OpenError> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let dir = runtime_dir.join("ui-open");
    crate::paths::ensure_private_dir(&dir).map_err(OpenError::Directory)?;
    if let Ok(entries) = std::fs::read_dir(&dir) {
        for entry in entries.flatten() {
            let expired = entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > ui::guard::LOGIN_TTL);
            if expired {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
    let stamp = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let file = dir.join(format!("page-{}-{stamp}.html", std::process::id()));
    let page = ui::pages::move_on(url, "Open the dsh page", false);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&file)
        .and_then(|mut f| f.write_all(page.as_bytes()))
        .map_err(|error| OpenError::Write {
            file: file.clone(),
            error,
        })?;
    Ok(file)
}

/// `path` as a `file://` URL (made absolute against the current
/// directory first: a relative `DSH_RUNTIME_DIR` names a relative path).
pub fn file_url(path: &Path) -> Result<String, OpenError> {
    let absolute = std::path::absolute(path).map_err(|error| OpenError::Absolute {
        path: path.to_path_buf(),
        error,
    })?;
    url::Url::from_file_path(&absolute)
        .map(String::from)
        .map_err(|()| OpenError::NoFileUrl { path: absolute })
}

/// Opens the sign-in link `url` in the person's browser (`$BROWSER`,
/// else `xdg-open`) without putting it on the browser's command line,
/// where every user of the machine could read it (`ps`): the browser gets
/// a file only this user can read, whose page moves on to the link.
/// Returns the browser's name.
pub fn open_in_browser(runtime_dir: &Path, url: &str) -> Result<String, OpenError> {
    let browser = std::env::var("BROWSER")
        .ok()
        .filter(|b| !b.trim().is_empty())
        .unwrap_or_else(|| "xdg-open".to_owned());
    let file = launch_file(runtime_dir, url).map_err(|e| OpenError::Launch(Box::new(e)))?;
    let file_url = file_url(&file).map_err(|e| {
        let _ = std::fs::remove_file(&file);
        OpenError::Launch(Box::new(e))
    })?;
    std::process::Command::new(&browser)
        .arg(file_url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map(|_| browser.clone())
        .map_err(|error| {
            let _ = std::fs::remove_file(&file);
            OpenError::Browser {
                browser: browser.clone(),
                error,
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn a_launch_file_is_named_by_an_absolute_escaped_file_url() {
        assert_eq!(
            file_url(std::path::Path::new("/run/dsh 1/ui-open/page-1.html"))
                .ok()
                .as_deref(),
            Some("file:///run/dsh%201/ui-open/page-1.html")
        );
        // A relative runtime directory: the URL still names the file, from
        // wherever the tests run (a directory whose name needs escaping
        // too).
        let here = std::env::current_dir().unwrap_or_default();
        let url = file_url(std::path::Path::new("rel/page.html")).unwrap_or_default();
        assert!(url.starts_with("file:///") && !url.contains(' '), "{url}");
        assert_eq!(
            url::Url::parse(&url)
                .ok()
                .and_then(|u| u.to_file_path().ok()),
            Some(here.join("rel/page.html"))
        );
    }
}
