//! Finds the script file, reads it, and hashes the exact bytes that will be embedded.

use std::path::{Path, PathBuf};

use syn::LitStr;

/// A script file read at compile time.
pub(crate) struct Source {
    /// Absolute path, for `include_str!`.
    pub(crate) absolute: PathBuf,
    /// The text, byte for byte.
    pub(crate) text: String,
    /// SHA1 of `text` as 40 lowercase hex digits.
    pub(crate) sha1: String,
    /// The file stem, e.g. `compare-del`.
    pub(crate) name: String,
}

/// Resolves `lit` against the calling crate's `CARGO_MANIFEST_DIR` and reads it. Every
/// failure is an error on the literal.
pub(crate) fn load(lit: &LitStr) -> syn::Result<Source> {
    let written = lit.value();
    let fail = |msg: String| syn::Error::new(lit.span(), msg);
    let absolute = resolve(lit, "script")?;
    let relative = Path::new(&written);
    let bytes = std::fs::read(&absolute).map_err(|e| {
        fail(format!(
            "cannot read script `{written}` (relative to CARGO_MANIFEST_DIR): {}",
            io_reason(&e)
        ))
    })?;
    let text = String::from_utf8(bytes).map_err(|e| {
        fail(format!(
            "script `{written}` is not valid UTF-8 (byte {}): Redis scripts are Lua text",
            e.utf8_error().valid_up_to()
        ))
    })?;
    let sha1 = sha1_smol::Sha1::from(text.as_bytes()).digest().to_string();
    let name = relative
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    Ok(Source {
        absolute,
        text,
        sha1,
        name,
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
    let dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .ok_or_else(|| fail("CARGO_MANIFEST_DIR is not set: build with cargo".to_owned()))?;
    Ok(Path::new(&dir).join(relative))
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
