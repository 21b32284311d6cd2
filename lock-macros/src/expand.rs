//! Writes the typed function: the embedded script, its registration, and the call.

use proc_macro2::{Ident, Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{LitStr, ReturnType};

use crate::args::Args;
use crate::item::{Param, ScriptFn};
use crate::source::Source;
use crate::{check, reply, source};
use lockscript_audit::commands::Product;
use lockscript_audit::floor::Floor;
use lockscript_audit::lua;

/// The whole attribute: parse, check, expand. Errors come out as `compile_error!`s next
/// to a stub with the declared signature, so call sites do not cascade into more errors.
pub(crate) fn lock_script(attr: TokenStream, item: TokenStream) -> TokenStream {
    let args = match syn::parse2::<Args>(attr) {
        Ok(args) => args,
        Err(e) => return with_stub(&e, item),
    };
    let mut func = match syn::parse2::<ScriptFn>(item) {
        Ok(func) => func,
        Err(e) => return e.to_compile_error(),
    };
    let mut errors = Vec::new();
    let params = func.take_params(&mut errors);
    let source = match source::load(&args.path) {
        Ok(source) => Some(source),
        Err(e) => {
            errors.push(e);
            None
        }
    };
    if args.guarded.is_some()
        && let Some(taken) = params.iter().find(|p| p.name == "guard")
    {
        errors.push(syn::Error::new_spanned(
            &taken.name,
            "a `guarded` script function takes the guard as its first parameter, named \
             `guard`: rename this one",
        ));
    }
    if let (Some(source), Some(_)) = (&source, &args.guarded)
        && let Some(place) = source.expanded.first_invalid()
    {
        errors.push(syn::Error::new(
            args.path.span(),
            format!(
                "{}:{}: not UTF-8, so it cannot be `guarded`: the guard is Lua text wrapped \
                 around the script's text",
                source.relative(&place.path),
                place.at
            ),
        ));
    }
    if let Some(source) = &source {
        let mut analysis = lua::analyze(&source.text);
        // A script declared for newer servers is checked for those: a global only they
        // define is then fine.
        if let Some(requires) = &args.requires
            && let Ok(declared) = lockscript_audit::floor::Requires::parse(&requires.value())
        {
            analysis = lua::analyze_on(&source.text, declared.narrow(analysis.servers));
        }
        check::check(
            &args.path,
            &func.sig.ident,
            source,
            &analysis,
            &params,
            args.sha1.as_ref(),
            &mut errors,
        );
        if let Some(requires) = &args.requires {
            check::requires(requires, source, &Floor::of(&analysis), &mut errors);
        }
        reply::check(&args.path, &func.sig.output, source, &analysis, &mut errors);
        let guarded = args.guarded.map(|_| Guarded::new(source));
        if errors.is_empty() {
            return expand(&args, &func, &params, source, &analysis, guarded.as_ref());
        }
    }
    let errors: TokenStream = errors.iter().map(syn::Error::to_compile_error).collect();
    let stub = stub(&func, &args);
    quote!(#errors #stub)
}

/// The guarded form of a script: what is sent, and its digest.
struct Guarded {
    source: String,
    sha1: String,
}

impl Guarded {
    fn new(source: &Source) -> Self {
        // The file was checked as it is; the wrapper around it is fixed text, tested in
        // `lockscript_audit::guarded` to parse for any script that does.
        let wrapped = lockscript_audit::guarded::wrap(&source.text);
        Self {
            sha1: lockscript_audit::sha1_hex(wrapped.as_bytes()),
            source: wrapped,
        }
    }
}

/// What the function sends: the file as it is (embedded with `include_str!`, so editing
/// it rebuilds), or its guarded form (a literal; an `include_str!` still tracks the file).
struct Sent {
    name: String,
    text: TokenStream,
    /// The exact bytes, for a script that is not UTF-8.
    bytes: Option<TokenStream>,
    sha1: String,
    /// Keys and arguments the guard puts before the script's own.
    added: usize,
}

impl Sent {
    fn of(source: &Source, guarded: Option<&Guarded>) -> Self {
        let absolute = source.absolute.to_string_lossy().into_owned();
        // Every file of the script is tracked, so editing an included one rebuilds too.
        let tracked: Vec<String> = source
            .parts()
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
        match guarded {
            None if !source.expanded.is_utf8() => {
                // Redis runs any bytes: they are sent as they are, and `source()` shows
                // them as text.
                let text = &source.text;
                let bytes = if source.expanded.has_includes() {
                    let literal = proc_macro2::Literal::byte_string(&source.expanded.bytes);
                    quote!({
                        #(const _: &[u8] = ::core::include_bytes!(#tracked);)*
                        #literal
                    })
                } else {
                    quote!(::core::include_bytes!(#absolute))
                };
                Self {
                    name: source.name.clone(),
                    text: quote!(#text),
                    bytes: Some(bytes),
                    sha1: source.sha1.clone(),
                    added: 0,
                }
            }
            None if !source.expanded.has_includes() => Self {
                name: source.name.clone(),
                text: quote!(::core::include_str!(#absolute)),
                bytes: None,
                sha1: source.sha1.clone(),
                added: 0,
            },
            None => {
                let text = &source.text;
                Self {
                    name: source.name.clone(),
                    text: quote!({
                        #(const _: &[u8] = ::core::include_bytes!(#tracked);)*
                        #text
                    }),
                    bytes: None,
                    sha1: source.sha1.clone(),
                    added: 0,
                }
            }
            Some(g) => {
                let text = &g.source;
                Self {
                    name: format!("{}+guarded", source.name),
                    text: quote!({
                        #(const _: &[u8] = ::core::include_bytes!(#tracked);)*
                        #text
                    }),
                    bytes: None,
                    sha1: g.sha1.clone(),
                    added: lockscript_audit::guarded::ADDED,
                }
            }
        }
    }
}

/// The signature as generated: returns an `Invocation`, and for a guarded script takes
/// `guard: &Guard` first, where `Guard: Guarded`.
fn generated_sig(func: &ScriptFn, args: &Args) -> syn::Signature {
    let krate = &args.krate;
    let mut sig = func.sig.clone();
    let reply = reply_type(func);
    sig.output = syn::parse_quote!(-> #krate::Invocation<#reply>);
    let taken = sig.inputs.iter().any(|input| {
        matches!(input, syn::FnArg::Typed(arg) if matches!(&*arg.pat, syn::Pat::Ident(p) if p.ident == "guard"))
    });
    if args.guarded.is_some() && !taken {
        sig.generics
            .params
            .push(syn::parse_quote!(Guard: #krate::Guarded + ?Sized));
        sig.inputs.insert(0, syn::parse_quote!(guard: &Guard));
    }
    sig
}

/// The attribute itself did not parse: report that, and keep the function declared.
fn with_stub(error: &syn::Error, item: TokenStream) -> TokenStream {
    let error = error.to_compile_error();
    let stub = match syn::parse2::<ScriptFn>(item) {
        Ok(mut func) => {
            func.take_params(&mut Vec::new());
            let args = Args {
                path: LitStr::new("", proc_macro2::Span::call_site()),
                sha1: None,
                krate: syn::parse_quote!(::lockscript),
                guarded: None,
                requires: None,
            };
            stub(&func, &args)
        }
        Err(_) => TokenStream::new(),
    };
    quote!(#error #stub)
}

fn reply_type(func: &ScriptFn) -> TokenStream {
    match &func.sig.output {
        ReturnType::Default => quote!(()),
        ReturnType::Type(_, ty) => quote!(#ty),
    }
}

/// The declared signature with a body that never runs (the build has already failed).
fn stub(func: &ScriptFn, args: &Args) -> TokenStream {
    let ScriptFn { attrs, vis, .. } = func;
    let mut sig = generated_sig(func, args);
    sig.asyncness = None;
    sig.constness = None;
    sig.unsafety = None;
    quote! {
        #(#attrs)*
        #[allow(unused_variables, clippy::all)]
        #vis #sig {
            ::core::unreachable!()
        }
    }
}

fn expand(
    args: &Args,
    func: &ScriptFn,
    params: &[Param],
    source: &Source,
    analysis: &lua::Analysis,
    guarded: Option<&Guarded>,
) -> TokenStream {
    let krate = &args.krate;
    let ScriptFn { attrs, vis, .. } = func;
    let sig = generated_sig(func, args);
    let reply = reply_type(func);

    let path: &LitStr = &args.path;
    let Sent {
        name,
        text,
        bytes,
        sha1,
        added,
    } = Sent::of(source, guarded);
    let bytes = bytes.map(|b| quote!(.__with_bytes(#b)));
    let read_only = analysis.read_only();
    let flags = &analysis.flags;
    let arity = |key: bool| {
        let fixed = added
            + params
                .iter()
                .filter(|p| p.key == key && !p.variadic)
                .count();
        if params.iter().any(|p| p.key == key && p.variadic) {
            quote!(#krate::Arity::AtLeast(#fixed))
        } else {
            quote!(#krate::Arity::Exactly(#fixed))
        }
    };
    let keys_arity = arity(true);
    let args_arity = arity(false);

    // The body's own locals are mixed-site: hygienic, so no parameter (named `invocation`
    // or `script` too) can be shadowed by one, nor shadow one. The statics live in a
    // block of their own, where no parameter is named.
    let invocation = Ident::new("invocation", Span::mixed_site());
    let script = Ident::new("script", Span::mixed_site());
    let fixed_keys = params.iter().filter(|p| p.key && !p.variadic).count();
    // Every use of a parameter goes through the public `ScriptArg` trait, spanned at
    // the parameter's type: a type that cannot be sent is one error there, in
    // lockscript's words.
    let variadic_keys = params.iter().filter(|p| p.key && p.variadic).map(|p| {
        let n = &p.name;
        let ty = &p.ty;
        quote_spanned!(ty.span()=> + <#ty as #krate::ScriptArg>::__count(&#n))
    });
    let key_pushes = params
        .iter()
        .filter(|p| p.key)
        .map(|p| push(krate, p, &invocation));
    let arg_pushes = params
        .iter()
        .filter(|p| !p.key)
        .map(|p| push(krate, p, &invocation));
    let (start, guard_args) = if guarded.is_some() {
        (
            quote!(#krate::Invocation::<#reply>::__guarded(
                #script,
                #krate::Guarded::__guard(guard),
                #fixed_keys #(#variadic_keys)*,
            )),
            quote!(#invocation.__guard_args();),
        )
    } else {
        (
            quote!(#krate::Invocation::<#reply>::__new(
                #script,
                #fixed_keys #(#variadic_keys)*,
            )),
            TokenStream::new(),
        )
    };

    // With `requires`, the script's floor was checked against it: the warnings about
    // commands some servers lack are answered.
    let warnings = if args.requires.is_some() {
        TokenStream::new()
    } else {
        warnings(path, source, analysis)
    };
    let floor = floor(&Floor::of(analysis));
    let placed = placement(source, guarded);
    let (reply_check, replies) = (reply_check(func, krate), replies_doc(analysis));

    quote! {
        #(#attrs)*
        #replies
        #vis #sig {
            #warnings
            #reply_check
            let #script: &'static #krate::Script = {
                static __LOCK_SCRIPT: #krate::Script = #krate::Script::__new(
                    #name,
                    #path,
                    #text,
                    #sha1,
                    #keys_arity,
                    #args_arity,
                    #read_only,
                    &[#(#flags),*],
                )#placed #floor #bytes;
                #[#krate::__private::linkme::distributed_slice(#krate::__private::SCRIPTS)]
                #[linkme(crate = #krate::__private::linkme)]
                static __LOCK_SCRIPT_REGISTERED: &#krate::Script = &__LOCK_SCRIPT;
                &__LOCK_SCRIPT
            };
            let mut #invocation = #start;
            #(#key_pushes)*
            #guard_args
            #(#arg_pushes)*
            #invocation
        }
    }
}

/// A paragraph of the function's documentation saying what the script may reply, as
/// the reply check inferred it (nothing when nothing was inferred).
fn replies_doc(analysis: &lua::Analysis) -> TokenStream {
    let all = lockscript_audit::reply::Return::all(&analysis.returns);
    if all.is_empty() {
        return TokenStream::new();
    }
    let line =
        format!(" The script replies (as `#[lock_script]` infers it from its `return`s): {all}.");
    quote!(#[doc = ""] #[doc = #line])
}

/// Sends parameter `p` into the invocation being built, through the public `ScriptArg`
/// trait spanned at its type.
fn push(krate: &syn::Path, p: &Param, invocation: &Ident) -> TokenStream {
    let n = &p.name;
    let ty = &p.ty;
    let label = n.to_string();
    if p.variadic {
        quote_spanned!(ty.span()=> <#ty as #krate::ScriptArg>::__push_many(&#n, &mut #invocation);)
    } else {
        quote_spanned!(ty.span()=> <#ty as #krate::ScriptArg>::__push_one(&#n, &mut #invocation, #label);)
    }
}

/// The oldest server of each product that runs the script, for `load_scripts` to hold
/// against the server it loads into: `(product, version, command)`, an empty version
/// when no version of the product runs it.
fn floor(floor: &Floor) -> TokenStream {
    let needs = [
        (Product::Redis, &floor.redis),
        (Product::Valkey, &floor.valkey),
    ]
    .into_iter()
    .filter_map(|(product, need)| {
        let need = need.as_ref()?;
        let product = product.to_string();
        let version = need.version.map(|v| v.to_string()).unwrap_or_default();
        let because = &need.because;
        Some(quote!((#product, #version, #because)))
    })
    .collect::<Vec<_>>();
    if needs.is_empty() {
        TokenStream::new()
    } else {
        quote!(.__with_floor(&[#(#needs),*]))
    }
}

/// Where each line of the sent source comes from, so a server's error names the file
/// and line (the included file's own): only needed when the source has includes.
fn placement(source: &Source, guarded: Option<&Guarded>) -> TokenStream {
    let map = source.expanded.line_map();
    // Each line of what is sent: the part and its line there, or `u16::MAX` for a line
    // of the guard's own (the runtime names no file for it).
    let lines: Vec<(usize, usize)> = match guarded {
        Some(g) => {
            let offset = lockscript_audit::guarded::offset(&source.text);
            (1..=g.source.lines().count())
                .map(|sent| {
                    sent.checked_sub(offset + 1)
                        .and_then(|i| map.get(i).copied())
                        .unwrap_or((usize::from(u16::MAX), 0))
                })
                .collect()
        }
        None if source.expanded.has_includes() => map.to_vec(),
        None => return TokenStream::new(),
    };
    let parts = source.parts().map(|p| source.relative(p));
    let lines = lines.iter().map(|&(part, line)| {
        let part = u16::try_from(part).unwrap_or(u16::MAX);
        let line = u32::try_from(line).unwrap_or(u32::MAX);
        quote!((#part, #line))
    });
    quote!(.__with_parts(&[#(#parts),*], &[#(#lines),*]))
}

/// The return type is checked where it is declared, not at the first `.invoke`.
fn reply_check(func: &ScriptFn, krate: &syn::Path) -> TokenStream {
    match &func.sig.output {
        ReturnType::Default => TokenStream::new(),
        ReturnType::Type(_, ty) => {
            quote_spanned!(ty.span()=> let () = <#ty as #krate::ScriptReply>::__CHECKED;)
        }
    }
}

/// The analysis's warnings (commands some servers lack), shown by the compiler on stable
/// Rust, which gives a macro no way to warn: each is the note of a `#[deprecated]`
/// function that the generated body calls, both spanned at the path literal. The build
/// prints "warning: use of deprecated function <fn>::script_warning: <file>:<line>:<col>:
/// <message>" pointing at the attribute; `#[allow(deprecated)]` on the function silences it.
fn warnings(lit: &LitStr, source: &Source, analysis: &lua::Analysis) -> TokenStream {
    analysis
        .warnings
        .iter()
        .map(|warning| {
            let note = format!("{}: {}", source.shown(warning.at), warning.message);
            quote_spanned! {lit.span()=>
                {
                    #[deprecated(note = #note)]
                    fn script_warning() {}
                    script_warning();
                }
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::replies_doc;

    #[test]
    fn the_generated_docs_state_what_the_script_replies() {
        let analysis = lockscript_audit::lua::analyze("return redis.call('GET', KEYS[1])");
        let doc = replies_doc(&analysis).to_string();
        assert!(doc.contains("The script replies"), "{doc}");
        assert!(doc.contains("nil | bulk string"), "{doc}");
        // A script that does not parse has no inferred reply: no paragraph.
        assert!(replies_doc(&lockscript_audit::lua::analyze("return (")).is_empty());
    }
}
