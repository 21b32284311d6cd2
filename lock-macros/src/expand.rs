//! Writes the typed function: the embedded script, its registration, and the call.

use proc_macro2::TokenStream;
use quote::quote;
use syn::{LitStr, ReturnType};

use crate::args::Args;
use crate::item::{Param, ScriptFn};
use crate::source::Source;
use crate::{check, source};
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
    if let Some(source) = &source {
        let analysis = lua::analyze(&source.text);
        check::check(
            &args.path,
            &func.sig.ident,
            source,
            &analysis,
            &params,
            args.sha1.as_ref(),
            &mut errors,
        );
        if errors.is_empty() {
            return expand(&args, &func, &params, source, &analysis);
        }
    }
    let errors: TokenStream = errors.iter().map(syn::Error::to_compile_error).collect();
    let stub = stub(&func, &args.krate);
    quote!(#errors #stub)
}

/// The attribute itself did not parse: report that, and keep the function declared.
fn with_stub(error: &syn::Error, item: TokenStream) -> TokenStream {
    let error = error.to_compile_error();
    let stub = match syn::parse2::<ScriptFn>(item) {
        Ok(mut func) => {
            func.take_params(&mut Vec::new());
            stub(&func, &syn::parse_quote!(::lockscript))
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
fn stub(func: &ScriptFn, krate: &syn::Path) -> TokenStream {
    let ScriptFn {
        attrs, vis, sig, ..
    } = func;
    let mut sig = sig.clone();
    let reply = reply_type(func);
    sig.output = syn::parse_quote!(-> #krate::Invocation<#reply>);
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
) -> TokenStream {
    let krate = &args.krate;
    let ScriptFn {
        attrs, vis, sig, ..
    } = func;
    let mut sig = sig.clone();
    let reply = reply_type(func);
    sig.output = syn::parse_quote!(-> #krate::Invocation<#reply>);

    let name = &source.name;
    let path: &LitStr = &args.path;
    let absolute = source.absolute.to_string_lossy().into_owned();
    let sha1 = &source.sha1;
    let read_only = analysis.read_only();
    let flags = &analysis.flags;
    let arity = |key: bool| {
        let fixed = params
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

    let fixed_keys = params.iter().filter(|p| p.key && !p.variadic).count();
    let variadic_keys = params.iter().filter(|p| p.key && p.variadic).map(|p| {
        let n = &p.name;
        quote!(+ #krate::__private::ToRedisArgs::num_of_args(&#n))
    });
    let pushes = params
        .iter()
        .filter(|p| p.key)
        .chain(params.iter().filter(|p| !p.key))
        .map(|p| {
            let n = &p.name;
            let label = n.to_string();
            if p.variadic {
                quote!(invocation.__many(&#n);)
            } else {
                quote!(invocation.__one(#label, &#n);)
            }
        });

    quote! {
        #(#attrs)*
        #vis #sig {
            static __LOCK_SCRIPT: #krate::Script = #krate::Script::__new(
                #name,
                #path,
                ::core::include_str!(#absolute),
                #sha1,
                #keys_arity,
                #args_arity,
                #read_only,
                &[#(#flags),*],
            );
            #[#krate::__private::linkme::distributed_slice(#krate::__private::SCRIPTS)]
            #[linkme(crate = #krate::__private::linkme)]
            static __LOCK_SCRIPT_REGISTERED: &#krate::Script = &__LOCK_SCRIPT;

            let mut invocation = #krate::Invocation::<#reply>::__new(
                &__LOCK_SCRIPT,
                #fixed_keys #(#variadic_keys)*,
            );
            #(#pushes)*
            invocation
        }
    }
}
