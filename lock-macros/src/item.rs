//! The bodyless function the attribute sits on: `fn name(#[key] k: &str, a: u64) -> R;`.

use syn::parse::{Parse, ParseStream};
use syn::{Attribute, Block, FnArg, Ident, Pat, Signature, Token, Type, Visibility};

/// The declaration as written.
pub(crate) struct ScriptFn {
    pub(crate) attrs: Vec<Attribute>,
    pub(crate) vis: Visibility,
    /// The signature with `#[key]` markers removed from its parameters.
    pub(crate) sig: Signature,
    /// A body the user wrote by mistake.
    pub(crate) body: Option<Block>,
}

/// One parameter: a Redis key or a script argument.
pub(crate) struct Param {
    pub(crate) name: Ident,
    /// Marked `#[key]`: goes to KEYS, otherwise to ARGV.
    pub(crate) key: bool,
    /// A slice or `Vec` (not of `u8`): fills any number of slots.
    pub(crate) variadic: bool,
    /// The declared type, which errors about sending it point at.
    pub(crate) ty: Type,
}

impl Parse for ScriptFn {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let attrs = input.call(Attribute::parse_outer)?;
        let vis: Visibility = input.parse()?;
        let sig: Signature = input.parse()?;
        let body = if input.peek(Token![;]) {
            input.parse::<Token![;]>()?;
            None
        } else {
            Some(input.parse::<Block>()?)
        };
        Ok(Self {
            attrs,
            vis,
            sig,
            body,
        })
    }
}

impl ScriptFn {
    /// Takes the `#[key]` markers off the signature and returns the parameters, with an
    /// error for each parameter or signature part the macro cannot support.
    pub(crate) fn take_params(&mut self, errors: &mut Vec<syn::Error>) -> Vec<Param> {
        let sig = &self.sig;
        if let Some(t) = &sig.asyncness {
            errors.push(syn::Error::new_spanned(
                t,
                "remove `async`: the function returns an Invocation, which has `.invoke_async(&mut conn).await`",
            ));
        }
        if let Some(t) = &sig.constness {
            errors.push(syn::Error::new_spanned(
                t,
                "a script function cannot be `const`",
            ));
        }
        if let Some(t) = &sig.unsafety {
            errors.push(syn::Error::new_spanned(
                t,
                "a script function has nothing unsafe about it: remove `unsafe`",
            ));
        }
        if let Some(v) = &sig.variadic {
            errors.push(syn::Error::new_spanned(
                v,
                "C variadics are not supported; use a slice parameter",
            ));
        }
        if let Some(body) = &self.body {
            errors.push(syn::Error::new_spanned(
                body,
                "#[lock_script] writes the body: declare the function without one, ending in `;`",
            ));
        }

        let mut params = Vec::new();
        for input in &mut self.sig.inputs {
            let arg = match input {
                FnArg::Receiver(r) => {
                    errors.push(syn::Error::new_spanned(
                        r,
                        "a script function takes no `self`",
                    ));
                    continue;
                }
                FnArg::Typed(arg) => arg,
            };
            let before = arg.attrs.len();
            arg.attrs.retain(|a| !a.path().is_ident("key"));
            let key = arg.attrs.len() != before;
            if let Some(place) = impl_trait(&arg.ty) {
                errors.push(syn::Error::new_spanned(
                    place,
                    "`impl Trait` cannot be the type of a script function's parameter: the \
                     generated body names each parameter's type to send it; use a concrete \
                     type (`&str`, `u64`, `&[&str]`) or a generic parameter \
                     (`fn name<K: lockscript::ScriptArg>(#[key] key: K)`)",
                ));
                // Still a parameter: the counts of KEYS and ARGV are checked with it.
            }
            let name = match &*arg.pat {
                Pat::Ident(p) if p.by_ref.is_none() && p.subpat.is_none() => p.ident.clone(),
                other => {
                    errors.push(syn::Error::new_spanned(
                        other,
                        "give this parameter a plain name: it is used in error messages",
                    ));
                    continue;
                }
            };
            params.push(Param {
                name,
                key,
                variadic: is_variadic(&arg.ty),
                ty: (*arg.ty).clone(),
            });
        }
        params
    }
}

/// The first `impl Trait` in `ty` (`impl AsRef<str>`, `&impl ToString`, `Vec<impl X>`).
fn impl_trait(ty: &Type) -> Option<syn::TypeImplTrait> {
    struct Find(Option<syn::TypeImplTrait>);
    impl<'ast> syn::visit::Visit<'ast> for Find {
        fn visit_type_impl_trait(&mut self, found: &'ast syn::TypeImplTrait) {
            self.0.get_or_insert_with(|| found.clone());
        }
    }
    let mut find = Find(None);
    syn::visit::Visit::visit_type(&mut find, ty);
    find.0
}

/// `&[T]`, `Vec<T>` and `[T; N]` spread over several slots, except of `u8`, which is one
/// binary value.
fn is_variadic(ty: &Type) -> bool {
    let elem = match ty {
        Type::Reference(r) => return is_variadic(&r.elem),
        Type::Paren(p) => return is_variadic(&p.elem),
        Type::Group(g) => return is_variadic(&g.elem),
        Type::Slice(s) => &*s.elem,
        Type::Array(a) => &*a.elem,
        Type::Path(p) => {
            let Some(last) = p.path.segments.last() else {
                return false;
            };
            if last.ident != "Vec" {
                return false;
            }
            match &last.arguments {
                syn::PathArguments::AngleBracketed(a) => match a.args.first() {
                    Some(syn::GenericArgument::Type(t)) => t,
                    _ => return false,
                },
                _ => return false,
            }
        }
        _ => return false,
    };
    !matches!(elem, Type::Path(p) if p.path.is_ident("u8"))
}

#[cfg(test)]
mod tests {
    use super::{impl_trait, is_variadic};

    fn variadic(ty: &str) -> bool {
        is_variadic(&syn::parse_str(ty).unwrap())
    }

    #[test]
    fn impl_trait_is_found_anywhere_in_a_type() {
        let found = |ty: &str| impl_trait(&syn::parse_str(ty).unwrap()).is_some();
        assert!(found("impl AsRef<str>"));
        assert!(found("&impl ToString"));
        assert!(found("Vec<impl Into<String>>"));
        assert!(!found("&[&str]"));
        assert!(!found("K"));
    }

    #[test]
    fn slices_and_vecs_are_variadic_but_bytes_are_not() {
        assert!(variadic("&[&str]"));
        assert!(variadic("Vec<String>"));
        assert!(variadic("&[u64; 3]"));
        assert!(!variadic("&[u8]"));
        assert!(!variadic("Vec<u8>"));
        assert!(!variadic("&str"));
        assert!(!variadic("u64"));
    }
}
