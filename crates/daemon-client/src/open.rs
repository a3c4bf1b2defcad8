//! `dsh ui --open`: hands a browser the page's sign-in link through a
//! file only this user can read, never on a command line
//! ([`open_in_browser`]).

use std::path::Path;
use std::time::SystemTime;

/// Writes a page that moves on to the sign-in link `url` into a file only
/// this user can read (0600, in `ui-open/` under `runtime_dir`, made
/// 0700), for a browser to open: the link never appears on the browser's
/// command line, which every user of the machine can read (`ps`). Launch
/// files of earlier runs whose links have expired are removed first.
/// Returns the file.
pub fn launch_file(runtime_dir: &std::path::Path, url: &str) -> Result<std::path::PathBuf, String> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let dir = runtime_dir.join("ui-open");
    crate::paths::ensure_private_dir(&dir).map_err(|e| e.to_string())?;
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
        .map_err(|e| format!("cannot write {}: {e}", file.display()))?;
    Ok(file)
}

/// `path` as a `file://` URL (made absolute against the current
/// directory first: a relative `DSH_RUNTIME_DIR` names a relative path).
pub fn file_url(path: &std::path::Path) -> Result<String, String> {
    let absolute = std::path::absolute(path)
        .map_err(|e| format!("cannot make {} absolute: {e}", path.display()))?;
    url::Url::from_file_path(&absolute)
        .map(String::from)
        .map_err(|()| format!("{} cannot be named by a file:// URL", absolute.display()))
}

/// Opens the sign-in link `url` in the person's browser (`$BROWSER`,
/// else `xdg-open`) without putting it on the browser's command line,
/// where every user of the machine could read it (`ps`): the browser gets
/// a file only this user can read, whose page moves on to the link.
/// Returns the browser's name.
pub fn open_in_browser(runtime_dir: &Path, url: &str) -> Result<String, String> {
    let browser = std::env::var("BROWSER")
        .ok()
        .filter(|b| !b.trim().is_empty())
        .unwrap_or_else(|| "xdg-open".to_owned());
    let file = launch_file(runtime_dir, url).map_err(|e| format!("{e}; open the URL yourself"))?;
    let file_url = file_url(&file).map_err(|e| {
        let _ = std::fs::remove_file(&file);
        format!("{e}; open the URL yourself")
    })?;
    std::process::Command::new(&browser)
        .arg(file_url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map(|_| browser.clone())
        .map_err(|e| {
            let _ = std::fs::remove_file(&file);
            format!("could not start `{browser}` ({e}); open the URL yourself")
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn a_launch_file_is_named_by_an_absolute_escaped_file_url() {
        assert_eq!(
            file_url(std::path::Path::new("/run/dsh 1/ui-open/page-1.html")).as_deref(),
            Ok("file:///run/dsh%201/ui-open/page-1.html")
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
