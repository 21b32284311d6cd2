//! Holds the script's analysis against the Rust signature and the pin.
//!
//! Every check runs and adds its error; nothing stops at the first problem, so one
//! build shows all of them (serde's `Ctxt` idea).

use syn::LitStr;

use crate::item::Param;
use crate::source::Source;
use lockscript_audit::lua::{Analysis, Usage};

/// Everything wrong with the script or its fit to the signature, each on `lit`.
pub(crate) fn check(
    lit: &LitStr,
    fn_name: &syn::Ident,
    source: &Source,
    analysis: &Analysis,
    params: &[Param],
    pin: Option<&LitStr>,
    errors: &mut Vec<syn::Error>,
) {
    let path = lit.value();
    for problem in &source.expanded.problems {
        errors.push(syn::Error::new(
            lit.span(),
            format!(
                "{}:{}: {}",
                source.relative(&problem.place.path),
                problem.place.at,
                problem.message
            ),
        ));
    }
    for problem in &analysis.problems {
        errors.push(syn::Error::new(
            lit.span(),
            format!("{}: {}", source.shown(problem.at), problem.message),
        ));
    }
    if !analysis.parsed {
        // Counts from a script that does not parse would only add noise.
        return;
    }
    let keys: Vec<&Param> = params.iter().filter(|p| p.key).collect();
    let args: Vec<&Param> = params.iter().filter(|p| !p.key).collect();
    arity(
        lit,
        source,
        fn_name,
        "KEYS",
        "`#[key]` parameter",
        &analysis.keys,
        &keys,
        errors,
    );
    arity(
        lit,
        source,
        fn_name,
        "ARGV",
        "non-key parameter",
        &analysis.argv,
        &args,
        errors,
    );
    if let Some(pin) = pin {
        check_pin(pin, &path, &source.sha1, errors);
    }
}

fn plural(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

#[allow(clippy::too_many_arguments)]
fn arity(
    lit: &LitStr,
    source: &Source,
    fn_name: &syn::Ident,
    table: &str,
    what: &str,
    usage: &Usage,
    params: &[&Param],
    errors: &mut Vec<syn::Error>,
) {
    let path = lit.value();
    let fixed = params.iter().filter(|p| !p.variadic).count();
    let variadic: Vec<&&Param> = params.iter().filter(|p| p.variadic).collect();
    if let Some(extra) = variadic.get(1) {
        errors.push(syn::Error::new_spanned(
            &extra.name,
            format!("only one variadic {table} parameter is possible: the script cannot tell where one slice ends"),
        ));
    }
    if let Some(first) = variadic.first() {
        if let Some(after) = params.iter().skip_while(|p| !p.variadic).nth(1) {
            errors.push(syn::Error::new_spanned(
                &after.name,
                format!(
                    "the variadic {table} parameter `{}` must come last among the {what}s",
                    first.name
                ),
            ));
        }
        if !usage.dynamic {
            errors.push(syn::Error::new(
                lit.span(),
                format!(
                    "{path}: `{}` is variadic, but the script reads {table} only by fixed index; \
                     read it by count (`#{table}`, `{table}[i]`) or make the parameter a single value",
                    first.name
                ),
            ));
        }
        return;
    }
    // Read by count, the table holds however many entries the caller sends: only a
    // slice parameter says how many. The same rule for KEYS and ARGV.
    if let Some((at, how)) = &usage.counted {
        let example = if table == "KEYS" {
            "`#[key] keys: &[&str]`"
        } else {
            "`args: &[&str]`"
        };
        errors.push(syn::Error::new(
            lit.span(),
            format!(
                "{}: the script reads {table} by count (`{how}`), so `{fn_name}` needs a slice \
                 parameter for {table}, last among its {what}s (for example {example}); with \
                 {} it always sends the same number",
                source.shown(*at),
                plural(fixed, what)
            ),
        ));
        return;
    }
    if usage.highest != fixed {
        let used = match (usage.highest_at, usage.computed_at) {
            (Some(at), _) => format!(
                "{}: the script's highest {table} index is {table}[{}]",
                source.shown(at),
                usage.highest,
            ),
            (None, Some(at)) => format!(
                "{}: the script reads {table} only by a computed index, no {table}[n] with a \
                 number",
                source.shown(at)
            ),
            (None, None) => format!("{path}: the script reads no {table}[n]"),
        };
        errors.push(syn::Error::new(
            lit.span(),
            format!(
                "{used}, but `{fn_name}` has {}; the two numbers must be equal",
                plural(fixed, what)
            ),
        ));
    }
}

fn check_pin(pin: &LitStr, path: &str, actual: &str, errors: &mut Vec<syn::Error>) {
    let pinned = pin.value();
    if pinned.len() != 40 || !pinned.bytes().all(|b| b.is_ascii_hexdigit()) {
        errors.push(syn::Error::new(
            pin.span(),
            "a sha1 pin is 40 hex digits, as `sha1sum` prints it",
        ));
    } else if !pinned.eq_ignore_ascii_case(actual) {
        errors.push(syn::Error::new(
            pin.span(),
            format!(
                "{path} changed: its SHA1 is now {actual}, but the attribute pins {pinned}; \
                 review the change, then set sha1 = \"{actual}\""
            ),
        ));
    }
}

/// `requires = "redis 7.0, valkey 8.0"` against what the script needs: an error on the
/// literal for a declaration that does not parse, and for each declared server the script
/// cannot run on, naming the command (and where it is) that needs more.
pub(crate) fn requires(
    lit: &LitStr,
    source: &Source,
    floor: &lockscript_audit::floor::Floor,
    errors: &mut Vec<syn::Error>,
) {
    let declared = match lockscript_audit::floor::Requires::parse(&lit.value()) {
        Ok(declared) => declared,
        Err(why) => {
            errors.push(syn::Error::new(lit.span(), format!("requires: {why}")));
            return;
        }
    };
    for (product, version, need) in declared.unmet(floor) {
        errors.push(syn::Error::new(
            lit.span(),
            format!(
                "{}: the script needs {}, but `requires` names {product} {version}",
                source.shown(need.at),
                need.describe(product)
            ),
        ));
    }
}
