//! The attribute's arguments: `"path"`, then optional `guarded`, `sha1 = "..."`,
//! `requires = "..."` and `crate = "..."`.

use syn::parse::{Parse, ParseStream};
use syn::{LitStr, Path, Token};

mod kw {
    syn::custom_keyword!(sha1);
    syn::custom_keyword!(guarded);
    syn::custom_keyword!(requires);
}

/// `#[lock_script("scripts/x.lua", guarded, sha1 = "...", crate = "...")]`.
pub(crate) struct Args {
    /// The script's path, relative to `CARGO_MANIFEST_DIR`.
    pub(crate) path: LitStr,
    /// A pinned digest that the file must still have.
    pub(crate) sha1: Option<LitStr>,
    /// The runtime crate's path, `::lockscript` unless overridden.
    pub(crate) krate: Path,
    /// `guarded`: the call takes a guard and runs only while it holds its lock.
    pub(crate) guarded: Option<kw::guarded>,
    /// `requires = "redis 7.0, valkey 8.0"`: the oldest servers the script must run on.
    pub(crate) requires: Option<LitStr>,
}

impl Parse for Args {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let path: LitStr = input.parse().map_err(|e| {
            syn::Error::new(
                e.span(),
                "expected the script's path as a string literal: \
                 #[lock_script(\"scripts/name.lua\")]",
            )
        })?;
        let mut sha1 = None;
        let mut krate = None;
        let mut guarded = None;
        let mut requires = None;
        while !input.is_empty() {
            input.parse::<Token![,]>()?;
            if input.is_empty() {
                break;
            }
            let lookahead = input.lookahead1();
            if lookahead.peek(kw::guarded) {
                let key: kw::guarded = input.parse()?;
                if guarded.is_some() {
                    return Err(syn::Error::new(key.span, "`guarded` is given twice"));
                }
                guarded = Some(key);
            } else if lookahead.peek(kw::sha1) {
                let key: kw::sha1 = input.parse()?;
                input.parse::<Token![=]>()?;
                if sha1.is_some() {
                    return Err(syn::Error::new(
                        key.span,
                        "expected only a single `sha1` argument",
                    ));
                }
                sha1 = Some(input.parse::<LitStr>()?);
            } else if lookahead.peek(kw::requires) {
                let key: kw::requires = input.parse()?;
                input.parse::<Token![=]>()?;
                if requires.is_some() {
                    return Err(syn::Error::new(
                        key.span,
                        "expected only a single `requires` argument",
                    ));
                }
                requires = Some(input.parse::<LitStr>()?);
            } else if lookahead.peek(Token![crate]) {
                let key: Token![crate] = input.parse()?;
                input.parse::<Token![=]>()?;
                if krate.is_some() {
                    return Err(syn::Error::new(
                        key.span,
                        "expected only a single `crate` argument",
                    ));
                }
                let lit: LitStr = input.parse()?;
                krate = Some(lit.parse::<Path>()?);
            } else if input.peek(syn::Ident) {
                let unknown: syn::Ident = input.parse()?;
                return Err(syn::Error::new(
                    unknown.span(),
                    format!(
                        "unknown argument `{unknown}`: expected `guarded`, `sha1 = \"...\"`, `requires = \"...\"` or `crate = \"...\"`"
                    ),
                ));
            } else {
                return Err(lookahead.error());
            }
        }
        Ok(Self {
            path,
            sha1,
            krate: krate.unwrap_or_else(|| syn::parse_quote!(::lockscript)),
            guarded,
            requires,
        })
    }
}
