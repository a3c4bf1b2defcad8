//! The declaration of the config file's keys: `config_section!` writes
//! each key once (name, type, default, doc, and optionally a check) and
//! generates from it the serde struct, its `Default`, the table of keys
//! ([`KeyDoc`]) that `docs/config.md` is written from, and the checks
//! [`super::parse`] runs.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use tools_catalog::Preset;

/// One row of the config reference: a key, or a section (a table of
/// keys, listed after it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyDoc {
    /// The dotted key (`limits.max_result_bytes`); a section's is its
    /// table's name (`limits`).
    pub key: String,
    /// Whether this row is a section (a `[table]`) rather than a key.
    pub section: bool,
    /// The TOML type, in words, as Markdown (`integer`, `array of
    /// strings`, …).
    pub toml_type: String,
    /// The default as it would be written in TOML; `None` when the key has
    /// none (unset unless written, or required).
    pub default: Option<String>,
    /// Whether the key must be written when its section is.
    pub required: bool,
    /// What the key does, on one line.
    pub doc: String,
}

/// A key's check failed: the dotted key and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyError {
    /// The dotted key (`limits.max_result_bytes`).
    pub key: String,
    /// What is wrong.
    pub message: String,
}

/// A type a config key may have: how the reference names it, how its
/// default is written, and (for a section) its own keys.
pub trait ConfigValue {
    /// The TOML type, in words.
    fn toml_type() -> String;

    /// The value written as TOML; `None` when it is not written (an unset
    /// option).
    fn to_toml(&self) -> Option<toml::Value>;

    /// Appends the rows of a key of this type at `key` whose default is
    /// `default` (`None`: it has none) to `out`; a section appends its own
    /// row, then its keys'.
    fn rows(key: &str, default: Option<&Self>, required: bool, doc: &str, out: &mut Vec<KeyDoc>) {
        out.push(KeyDoc {
            key: key.to_owned(),
            section: false,
            toml_type: Self::toml_type(),
            default: default.and_then(Self::to_toml).map(|v| v.to_string()),
            required,
            doc: doc.to_owned(),
        });
    }

    /// Runs the declared checks of the value at `key` (a section: of each
    /// of its keys).
    fn check(&self, key: &str) -> Result<(), KeyError> {
        let _ = key;
        Ok(())
    }
}

/// Joins the lines of a doc comment into one line.
pub fn doc_line(lines: &[&str]) -> String {
    lines
        .iter()
        .map(|l| l.trim())
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// `key` under `prefix` (`""`: the top level).
pub fn dotted(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_owned()
    } else {
        format!("{prefix}.{key}")
    }
}

/// Runs a declared check on a key's value.
pub fn run_check<T>(
    value: &T,
    key: &str,
    check: impl FnOnce(&T) -> Result<(), String>,
) -> Result<(), KeyError> {
    check(value).map_err(|message| KeyError {
        key: key.to_owned(),
        message,
    })
}

/// Declares one section (one TOML table) of the config file, each key
/// once:
///
/// ```text
/// config_section! {
///     /// `[daemon]`.
///     pub struct DaemonConfig {
///         /// What the key does (the reference shows this text).
///         #[serde(deserialize_with = "duration")]
///         idle_exit: Duration = Duration::from_secs(600),
///         /// A key with a check, run after the file is read.
///         max_things: usize = 8 => |v| if *v > 0 { Ok(()) } else { Err("…".into()) },
///     }
/// }
/// ```
///
/// It generates the struct (public fields in the order written, which is
/// the order serde's "expected one of" lists them in; unknown keys are
/// refused), its `Default` (absent keys take the declared default) and
/// its [`ConfigValue`] (rows of the reference, checks). A key whose type
/// is itself a section lists that section's keys under its own.
///
/// `pub struct NAME without Default { … }` declares a section whose keys
/// may have no default (they must then be written); a key with one says
/// `#[serde(default)]` itself, and its declared default is the type's.
macro_rules! config_section {
    (
        $(#[doc = $sdoc:literal])*
        pub struct $name:ident {
            $(
                $(#[doc = $doc:literal])*
                $(#[serde($($serde:tt)*)])*
                $key:ident : $ty:ty = $default:expr $(=> $check:expr)?
            ),* $(,)?
        }
    ) => {
        $(#[doc = $sdoc])*
        #[derive(Debug, Clone, PartialEq, serde::Deserialize)]
        #[serde(deny_unknown_fields, default)]
        pub struct $name {
            $(
                $(#[doc = $doc])*
                $(#[serde($($serde)*)])*
                pub $key: $ty,
            )*
        }

        impl Default for $name {
            fn default() -> Self {
                Self {
                    $($key: $default,)*
                }
            }
        }

        config_section!(@value $name, |default| {
            let declared = Self::default();
            let default = default.unwrap_or(&declared);
        }, $(
            $key: $ty = (Some(default.$key.clone()), false), [$($doc),*] $(=> $check)?
        ),*);
    };
    (
        $(#[doc = $sdoc:literal])*
        pub struct $name:ident without Default {
            $(
                $(#[doc = $doc:literal])*
                $(#[serde($($serde:tt)*)])*
                $key:ident : $ty:ty $(= $default:expr)? $(=> $check:expr)?
            ),* $(,)?
        }
    ) => {
        $(#[doc = $sdoc])*
        #[derive(Debug, Clone, PartialEq, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct $name {
            $(
                $(#[doc = $doc])*
                $(#[serde($($serde)*)])*
                pub $key: $ty,
            )*
        }

        config_section!(@value $name, |default| {}, $(
            $key: $ty = {
                let declared: Option<$ty> = None $(.or(Some($default)))?;
                let required = declared.is_none();
                (default.map(|d| d.$key.clone()).or(declared), required)
            }, [$($doc),*] $(=> $check)?
        ),*);
    };
    // The ConfigValue of a section: `$prelude` binds what each key's
    // `$row` (its default, and whether it is required) reads of
    // `$default`, the section's default as its parent declares it.
    (
        @value $name:ident, |$default:ident| { $($prelude:tt)* },
        $($key:ident : $ty:ty = $row:expr, [$($doc:literal),*] $(=> $check:expr)?),*
    ) => {
        impl $crate::config::keys::ConfigValue for $name {
            fn toml_type() -> String {
                "table".to_owned()
            }

            fn to_toml(&self) -> Option<toml::Value> {
                None
            }

            fn rows(
                key: &str,
                $default: Option<&Self>,
                _required: bool,
                doc: &str,
                out: &mut Vec<$crate::config::keys::KeyDoc>,
            ) {
                out.push($crate::config::keys::KeyDoc {
                    key: key.to_owned(),
                    section: true,
                    toml_type: Self::toml_type(),
                    default: None,
                    required: false,
                    doc: doc.to_owned(),
                });
                $($prelude)*
                $(
                    let (default, required): (Option<$ty>, bool) = $row;
                    <$ty as $crate::config::keys::ConfigValue>::rows(
                        &$crate::config::keys::dotted(key, stringify!($key)),
                        default.as_ref(),
                        required,
                        &$crate::config::keys::doc_line(&[$($doc),*]),
                        out,
                    );
                )*
            }

            fn check(&self, key: &str) -> Result<(), $crate::config::keys::KeyError> {
                $(
                    let dotted = $crate::config::keys::dotted(key, stringify!($key));
                    $($crate::config::keys::run_check(&self.$key, &dotted, $check)?;)?
                    $crate::config::keys::ConfigValue::check(&self.$key, &dotted)?;
                )*
                Ok(())
            }
        }
    };
}

macro_rules! scalar {
    ($ty:ty, $name:literal, |$v:ident| $to:expr) => {
        impl ConfigValue for $ty {
            fn toml_type() -> String {
                $name.to_owned()
            }

            fn to_toml(&self) -> Option<toml::Value> {
                let $v = self;
                Some($to)
            }
        }
    };
}

scalar!(bool, "boolean", |v| toml::Value::Boolean(*v));
scalar!(u16, "integer", |v| toml::Value::Integer(i64::from(*v)));
scalar!(u64, "integer", |v| toml::Value::Integer(
    i64::try_from(*v).unwrap_or(i64::MAX)
));
scalar!(usize, "integer", |v| toml::Value::Integer(
    i64::try_from(*v).unwrap_or(i64::MAX)
));
scalar!(String, "string", |v| toml::Value::String(v.clone()));
scalar!(PathBuf, "string (a path)", |v| toml::Value::String(
    v.display().to_string()
));
scalar!(IpAddr, "string (an IP address)", |v| toml::Value::String(
    v.to_string()
));
scalar!(
    Duration,
    "string (a duration such as `\"10m\"`, `\"90s\"` or `\"1h 30m\"`)",
    |v| toml::Value::String(humantime::format_duration(*v).to_string())
);
scalar!(Vec<String>, "array of strings", |v| toml::Value::Array(
    v.iter().cloned().map(toml::Value::String).collect()
));
scalar!(BTreeMap<String, String>, "table of strings", |v| {
    toml::Value::Table(
        v.iter()
            .map(|(k, s)| (k.clone(), toml::Value::String(s.clone())))
            .collect(),
    )
});

impl ConfigValue for Preset {
    fn toml_type() -> String {
        one_of(Preset::ALL.iter().map(|p| p.name().to_owned()))
    }

    fn to_toml(&self) -> Option<toml::Value> {
        Some(toml::Value::String(self.name().to_owned()))
    }
}

impl<T: ConfigValue> ConfigValue for Option<T> {
    fn toml_type() -> String {
        T::toml_type()
    }

    fn to_toml(&self) -> Option<toml::Value> {
        self.as_ref().and_then(T::to_toml)
    }

    fn rows(key: &str, default: Option<&Self>, required: bool, doc: &str, out: &mut Vec<KeyDoc>) {
        T::rows(key, default.and_then(Option::as_ref), required, doc, out);
    }

    fn check(&self, key: &str) -> Result<(), KeyError> {
        self.as_ref().map_or(Ok(()), |v| v.check(key))
    }
}

/// The name a unit variant is written as (its serde name).
pub fn name_of<T: serde::Serialize>(value: &T) -> Option<String> {
    match toml::Value::try_from(value) {
        Ok(toml::Value::String(name)) => Some(name),
        _ => None,
    }
}

/// Implements [`ConfigValue`] for an enum written as the serde names of
/// its unit variants, listed in its `ALL`.
macro_rules! named_value {
    ($ty:ty) => {
        impl $crate::config::keys::ConfigValue for $ty {
            fn toml_type() -> String {
                $crate::config::keys::one_of(
                    Self::ALL.iter().filter_map($crate::config::keys::name_of),
                )
            }

            fn to_toml(&self) -> Option<toml::Value> {
                $crate::config::keys::name_of(self).map(toml::Value::String)
            }
        }
    };
}

/// The type of a string that is one of `names`, as Markdown:
/// `` `"a"`, `"b"` or `"c"` ``.
pub fn one_of(names: impl IntoIterator<Item = String>) -> String {
    let quoted: Vec<String> = names.into_iter().map(|n| format!("`\"{n}\"`")).collect();
    match quoted.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        Some((last, _)) => last.clone(),
        None => "string".to_owned(),
    }
}

/// The reference of every key, as Markdown (`docs/config.md`).
pub fn markdown(rows: &[KeyDoc]) -> String {
    let mut out = String::from(
        "# Configuration reference\n\n\
         <!-- Generated by `cargo xtask codegen` from the declarations in \
         crates/mcp-host/src/config.rs; do not edit. -->\n\n\
         The file is `$XDG_CONFIG_HOME/dsh/config.toml` (`~/.config/dsh/config.toml`), \
         or the one `--config FILE` names. Every key is optional unless marked required, \
         and an absent file means every default. An unknown key, a wrong type or a value \
         out of range is a one-line error naming the file, the line and the key. \
         `kill -HUP` on `dsh mcp` or the daemon re-reads it; which keys take effect \
         only when the daemon restarts is in the [README](../README.md#configuration).\n",
    );
    let mut open_table = false;
    let header = "\n| key | type | default | what |\n|---|---|---|---|\n";
    let top: Vec<&KeyDoc> = rows
        .iter()
        .filter(|r| !r.section && !r.key.contains('.'))
        .collect();
    if !top.is_empty() {
        out.push_str("\n## Top level\n");
        out.push_str(header);
        for row in top {
            out.push_str(&table_row(row, &row.key));
        }
    }
    for row in rows {
        if row.section {
            out.push_str(&format!("\n## `[{}]`\n\n{}\n", row.key, row.doc));
            open_table = false;
        } else if let Some((_, name)) = row.key.rsplit_once('.') {
            if !open_table {
                out.push_str(header);
                open_table = true;
            }
            out.push_str(&table_row(row, name));
        }
    }
    out
}

fn table_row(row: &KeyDoc, name: &str) -> String {
    let default = match (&row.default, row.required) {
        (_, true) => "required".to_owned(),
        (Some(d), false) => escape_cell(&format!("`{d}`")),
        (None, false) => "not set".to_owned(),
    };
    format!(
        "| `{name}` | {} | {default} | {} |\n",
        escape_cell(&row.toml_type),
        escape_cell(&row.doc)
    )
}

/// A table cell's text: a `|` would end the cell.
fn escape_cell(text: &str) -> String {
    text.replace('|', "\\|")
}
