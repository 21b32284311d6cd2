//! `#[lockscript_test::test]`: a test function run against a clean, private Redis.
//!
//! Parses its options (`fixtures("...")`, `flavor = "..."`, `crate = "..."`), checks every
//! fixture file (it exists, and each line parses and names a command with its subcommand
//! and a number of arguments the command table allows: `lockscript_audit::fixture`), and
//! writes a `#[test]` that, for each server of the matrix (`REDIS_SERVER_BIN`, one binary
//! or several), takes a [`TestRedis`] from the test crate's pool, loads the fixtures,
//! makes each argument from it and runs the body (on a tokio runtime when it is `async`).
//!
//! [`TestRedis`]: https://docs.rs/lockscript-test

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{FnArg, Ident, ItemFn, LitStr, Path, Token, Type};

mod kw {
    syn::custom_keyword!(fixtures);
    syn::custom_keyword!(flavor);
}

/// The options of `#[lockscript_test::test(...)]`.
struct Options {
    /// Files of redis-cli commands, relative to `CARGO_MANIFEST_DIR`, loaded in order.
    fixtures: Vec<LitStr>,
    /// `multi_thread` for a multi-thread runtime; the default is `current_thread`.
    multi_thread: bool,
    /// The test crate's path, `::lockscript_test` unless overridden.
    krate: Path,
}

impl Parse for Options {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let mut options = Options {
            fixtures: Vec::new(),
            multi_thread: false,
            krate: syn::parse_quote!(::lockscript_test),
        };
        while !input.is_empty() {
            let lookahead = input.lookahead1();
            if lookahead.peek(kw::fixtures) {
                input.parse::<kw::fixtures>()?;
                let content;
                syn::parenthesized!(content in input);
                let files = Punctuated::<LitStr, Token![,]>::parse_terminated(&content)?;
                options.fixtures.extend(files);
            } else if lookahead.peek(kw::flavor) {
                input.parse::<kw::flavor>()?;
                input.parse::<Token![=]>()?;
                let flavor: LitStr = input.parse()?;
                options.multi_thread = match flavor.value().as_str() {
                    "multi_thread" => true,
                    "current_thread" => false,
                    other => {
                        return Err(syn::Error::new(
                            flavor.span(),
                            format!(
                                "unknown flavor `{other}`: expected \"current_thread\" (the \
                                 default) or \"multi_thread\""
                            ),
                        ));
                    }
                };
            } else if lookahead.peek(Token![crate]) {
                input.parse::<Token![crate]>()?;
                input.parse::<Token![=]>()?;
                options.krate = input.parse::<LitStr>()?.parse()?;
            } else if input.peek(syn::Ident) {
                let unknown: syn::Ident = input.parse()?;
                return Err(syn::Error::new(
                    unknown.span(),
                    format!(
                        "unknown option `{unknown}`: expected `fixtures(\"file\", ...)`, \
                         `flavor = \"multi_thread\"` or `crate = \"...\"`"
                    ),
                ));
            } else {
                return Err(lookahead.error());
            }
            if !input.is_empty() {
                input.parse::<Token![,]>()?;
            }
        }
        Ok(options)
    }
}

/// The attribute: errors come out as `compile_error!`s at the offending token.
pub(crate) fn test(attr: TokenStream, item: TokenStream) -> TokenStream {
    let options = match syn::parse2::<Options>(attr) {
        Ok(options) => options,
        Err(e) => return e.to_compile_error(),
    };
    let func = match syn::parse2::<ItemFn>(item) {
        Ok(func) => func,
        Err(e) => return e.to_compile_error(),
    };
    match expand(&options, func) {
        Ok(tokens) => tokens,
        Err(e) => e.to_compile_error(),
    }
}

fn expand(options: &Options, func: ItemFn) -> syn::Result<TokenStream> {
    let krate = &options.krate;
    let fixtures = fixture_loads(options)?;
    if !func.sig.generics.params.is_empty() {
        return Err(syn::Error::new(
            func.sig.generics.span(),
            "a #[lockscript_test::test] function cannot be generic",
        ));
    }
    let is_async = func.sig.asyncness.is_some();
    let mut makes = Vec::new();
    let mut passes = Vec::new();
    let (mut handles, mut handle_by_value) = (0, false);
    for (i, input) in func.sig.inputs.iter().enumerate() {
        let FnArg::Typed(arg) = input else {
            return Err(syn::Error::new(
                input.span(),
                "a #[lockscript_test::test] function cannot take `self`",
            ));
        };
        let var = format_ident!("__lockscript_test_arg{i}");
        let (inner, reference) = match &*arg.ty {
            Type::Reference(r) => (&*r.elem, Some(r.mutability.is_some())),
            other => (other, None),
        };
        let span = arg.ty.span();
        if is_test_redis(inner) {
            // The handle itself: lent to the test, or given (the test then owns the server
            // for its duration and hands it back when it drops it).
            handles += 1;
            handle_by_value |= reference.is_none();
            passes.push(pass(&quote!(__lockscript_test_redis), reference));
            continue;
        }
        let make = if is_async {
            quote_spanned!(span=> <#inner as #krate::AsyncTestArg>::make(&__lockscript_test_redis).await)
        } else {
            quote_spanned!(span=> <#inner as #krate::TestArg>::make(&__lockscript_test_redis))
        };
        makes.push(quote!(#[allow(unused_mut)] let mut #var = #make;));
        passes.push(pass(&quote!(#var), reference));
    }
    if handles > 1 && handle_by_value {
        return Err(syn::Error::new(
            func.sig.inputs.span(),
            "a test that takes the TestRedis by value cannot take it twice",
        ));
    }

    let ItemFn {
        attrs,
        vis,
        mut sig,
        block,
    } = func;
    let name = sig.ident.clone();
    let output = sig.output.clone();
    let inner = Ident::new("__lockscript_test_body", Span::call_site());
    sig.ident = inner.clone();
    let run = if is_async {
        let multi = options.multi_thread;
        quote! {
            #krate::__private::runtime(#multi).block_on(async {
                #(#makes)*
                #inner(#(#passes),*).await
            })
        }
    } else {
        quote! {
            #(#makes)*
            #inner(#(#passes),*)
        }
    };
    // Once per server of the matrix; the closure owns the server's handle for one run.
    Ok(quote! {
        #[::core::prelude::v1::test]
        #(#attrs)*
        #vis fn #name() #output {
            #sig #block
            #krate::__private::each_server(|#[allow(unused_mut)] mut __lockscript_test_redis: #krate::TestRedis| {
                #(#fixtures)*
                #run
            })
        }
    })
}

/// `value` as the parameter takes it: by value (`None`), `&` or `&mut` (`Some(mutable)`).
fn pass(value: &TokenStream, reference: Option<bool>) -> TokenStream {
    match reference {
        None => quote!(#value),
        Some(false) => quote!(&#value),
        Some(true) => quote!(&mut #value),
    }
}

/// Whether `ty` names the test crate's `TestRedis` (by its last path segment).
fn is_test_redis(ty: &Type) -> bool {
    matches!(ty, Type::Path(p) if p.qself.is_none()
        && p.path.segments.last().is_some_and(|s| s.ident == "TestRedis"))
}

/// The fixture files whose problems this build has reported (see [`fixture_loads`]).
static REPORTED: std::sync::Mutex<std::collections::BTreeSet<std::path::PathBuf>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

/// One `load_fixture` call per fixture file, each embedded with `include_str!` (a changed
/// fixture rebuilds the test). An unreadable file is an error on its literal; a line that
/// does not parse or names a command the server would refuse is an error at the attribute
/// (`file:line: ...`), every one of every file in one build.
fn fixture_loads(options: &Options) -> syn::Result<Vec<TokenStream>> {
    let mut fixtures = Vec::new();
    let mut problems: Option<syn::Error> = None;
    for file in &options.fixtures {
        let path = crate::source::resolve(file, "fixture")?;
        // As written, without `./`.
        let shown = crate::source::tidy(std::path::Path::new(&file.value()));
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) => {
                return Err(syn::Error::new(
                    file.span(),
                    format!(
                        "cannot read fixture `{}` (relative to CARGO_MANIFEST_DIR): {}",
                        file.value(),
                        crate::source::io_reason(&e)
                    ),
                ));
            }
        };
        // A broken fixture's problems are listed once per build, at the first test that
        // names it (the compiler expands a crate's attributes in one process, in order);
        // every later test that uses it gets one line that points there, so it still
        // fails where it stands (and in an editor) without repeating the list.
        let found = lockscript_audit::fixture::check(&text);
        let first = REPORTED
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(path.clone());
        if !first && !found.is_empty() {
            let error = syn::Error::new(
                file.span(),
                format!(
                    "fixture `{}` is broken: its problems are listed at the first test \
                     that uses it",
                    file.value()
                ),
            );
            match &mut problems {
                Some(all) => all.combine(error),
                None => problems = Some(error),
            }
        }
        for problem in found.into_iter().filter(|_| first) {
            // At the attribute: the file and line say where, the attribute says which test.
            let error = syn::Error::new(
                Span::call_site(),
                format!("{}:{}: {}", shown.display(), problem.line, problem.message),
            );
            match &mut problems {
                Some(all) => all.combine(error),
                None => problems = Some(error),
            }
        }
        let shown = file.value();
        let full = path.to_string_lossy().into_owned();
        fixtures.push(quote! {
            __lockscript_test_redis.load_fixture(#shown, ::core::include_str!(#full));
        });
    }
    match problems {
        Some(problems) => Err(problems),
        None => Ok(fixtures),
    }
}
