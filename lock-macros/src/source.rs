//! Finds the script file, reads it with its `@include`s expanded (by
//! `lockscript_audit::include`, as the CLI does), and hashes the exact bytes that will
//! be embedded.

use std::path::{Path, PathBuf};

use lockscript_audit::include::{Expanded, expand};
use lockscript_audit::lua::Position;
use syn::LitStr;

/// A script file read at compile time.
pub(crate) struct Source {
    /// Absolute path, for `include_str!`.
    pub(crate) absolute: PathBuf,
    /// The text, byte for byte: the file's, or with includes, the expanded body (with
    /// U+FFFD for what is not UTF-8; `expanded.bytes` is then what is sent).
    pub(crate) text: String,
    /// SHA1 of `text` as 40 lowercase hex digits.
    pub(crate) sha1: String,
    /// The file stem, e.g. `compare-del`.
    pub(crate) name: String,
    /// The file and what it includes, and where each line of `text` comes from.
    pub(crate) expanded: Expanded,
    /// The calling crate's manifest directory, which file names are shown relative to.
    manifest_dir: PathBuf,
}

impl Source {
    /// Where a position of the expanded body is, as the user names the file:
    /// `scripts/includes/x.lua:3:5`.
    pub(crate) fn shown(&self, at: Position) -> String {
        let place = self.expanded.place(at);
        format!("{}:{}", self.relative(&place.path), place.at)
    }

    /// `path` relative to the manifest directory, when it is below it, without the `.`
    /// components a path may be written with (`./scripts/x.lua` shows as
    /// `scripts/x.lua`). Nothing is resolved on disk: `..` stays, as symlinks may make it
    /// mean something else than the textual parent.
    pub(crate) fn relative(&self, path: &Path) -> String {
        let path = tidy(path);
        path.strip_prefix(&self.manifest_dir)
            .unwrap_or(&path)
            .display()
            .to_string()
    }

    /// Every file the text is made of (the script first), absolute, for `include_bytes!`.
    pub(crate) fn parts(&self) -> impl Iterator<Item = &Path> {
        self.expanded.parts.iter().map(|p| p.path.as_path())
    }
}

/// Resolves `lit` against the calling crate's `CARGO_MANIFEST_DIR` and reads it. Every
/// failure is an error on the literal.
pub(crate) fn load(lit: &LitStr) -> syn::Result<Source> {
    let written = lit.value();
    let fail = |msg: String| syn::Error::new(lit.span(), msg);
    let absolute = resolve(lit, "script")?;
    let relative = Path::new(&written);
    let expanded = expand(&absolute).map_err(|e| {
        fail(format!(
            "cannot read script `{written}` (relative to CARGO_MANIFEST_DIR): {}",
            io_reason(&e)
        ))
    })?;
    let text = expanded.text.clone();
    // Over the bytes sent, which differ from `text` only in a file that is not UTF-8.
    let sha1 = sha1_smol::Sha1::from(&expanded.bytes).digest().to_string();
    let name = relative
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let manifest_dir = tidy(&manifest_dir(lit)?);
    Ok(Source {
        absolute,
        text,
        sha1,
        name,
        expanded,
        manifest_dir,
    })
}

/// `lit`, a path relative to the calling crate's `CARGO_MANIFEST_DIR`, made absolute;
/// `what` names the file in errors ("script", "fixture").
pub(crate) fn resolve(lit: &LitStr, what: &str) -> syn::Result<PathBuf> {
    let written = lit.value();
    let fail = |msg: String| syn::Error::new(lit.span(), msg);
    if written.is_empty() {
        return Err(fail(format!("the {what} path is empty")));
    }
    let relative = Path::new(&written);
    if relative.is_absolute() || written.starts_with('/') || written.starts_with('\\') {
        return Err(fail(format!(
            "absolute {what} path `{written}`: write it relative to the crate's Cargo.toml \
             (CARGO_MANIFEST_DIR) so the build is the same on every machine"
        )));
    }
    Ok(manifest_dir(lit)?.join(relative))
}

/// The calling crate's `CARGO_MANIFEST_DIR`.
fn manifest_dir(lit: &LitStr) -> syn::Result<PathBuf> {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .ok_or_else(|| {
            syn::Error::new(
                lit.span(),
                "CARGO_MANIFEST_DIR is not set: build with cargo",
            )
        })
}

/// `path` without its `.` components (`a/./b` is `a/b`, `./a` is `a`), as written
/// otherwise: `..` is kept, and no symlink is resolved.
pub(crate) fn tidy(path: &Path) -> PathBuf {
    path.components()
        .filter(|c| !matches!(c, std::path::Component::CurDir))
        .collect()
}

/// The OS message without the platform's error code, so messages are the same everywhere.
pub(crate) fn io_reason(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file".to_owned(),
        std::io::ErrorKind::PermissionDenied => "permission denied".to_owned(),
        std::io::ErrorKind::IsADirectory => "it is a directory".to_owned(),
        _ => e.to_string(),
    }
}
