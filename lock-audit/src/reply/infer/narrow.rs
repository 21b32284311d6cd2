//! What a test tells about a local in the branch it guards.

use full_moon::ast::{BinOp, Call, Expression, FunctionArgs, Index, Prefix, Suffix, UnOp, Var};
use full_moon::tokenizer::Symbol;

use super::{is_symbol, literal_string, name_of};
use crate::reply::shape::Shape;

/// How a test narrows a local in the branch it guards: to only these shapes (and
/// unknown), or without these.
#[derive(Clone)]
pub(super) enum Narrow {
    Only(Vec<Shape>),
    Not(Vec<Shape>),
}

const TABLES: [Shape; 4] = [Shape::Array, Shape::Status, Shape::StatusWord, Shape::Error];
const STRINGS: [Shape; 2] = [Shape::Bulk, Shape::Word];
const NUMBERS: [Shape; 2] = [Shape::Integer, Shape::Truncated];

impl Narrow {
    fn not_nil() -> Self {
        Self::Not(vec![Shape::Nil, Shape::False])
    }

    fn nil() -> Self {
        Self::Only(vec![Shape::Nil, Shape::False])
    }

    /// `type(v) == name` when `equal`, `~=` otherwise.
    fn of_type(name: &str, equal: bool) -> Option<Self> {
        let kinds: Vec<Shape> = match name {
            "table" => TABLES.to_vec(),
            "string" => STRINGS.to_vec(),
            "number" => NUMBERS.to_vec(),
            "nil" => vec![Shape::Nil],
            _ => return None,
        };
        Some(if equal {
            Self::Only(kinds)
        } else {
            Self::Not(kinds)
        })
    }
}

/// The locals `condition` narrows when it is `truthy` (or false): `v`, `not v`, `v ==
/// false`, `v ~= nil`, `v == 'text'`, and their `and` / `or`.
pub(super) fn narrows(condition: &Expression, truthy: bool) -> Vec<(String, Narrow)> {
    let local = |e: &Expression| match e {
        Expression::Var(Var::Name(n)) => name_of(n).map(str::to_owned),
        _ => None,
    };
    match condition {
        Expression::Parentheses { expression, .. } => narrows(expression, truthy),
        Expression::UnaryOperator {
            unop: UnOp::Not(_),
            expression,
        } => narrows(expression, !truthy),
        Expression::Var(Var::Name(_)) => local(condition)
            .map(|n| {
                vec![(
                    n,
                    if truthy {
                        Narrow::not_nil()
                    } else {
                        Narrow::nil()
                    },
                )]
            })
            .unwrap_or_default(),
        // `v.err`, `v.ok`: true only for an error (a status) table.
        Expression::Var(Var::Expression(v)) if truthy => {
            let suffixes: Vec<&Suffix> = v.suffixes().collect();
            match (v.prefix(), suffixes.as_slice()) {
                (Prefix::Name(n), [Suffix::Index(Index::Dot { name, .. })]) => {
                    let kinds = match name_of(name) {
                        Some("err") => vec![Shape::Error],
                        Some("ok") => vec![Shape::Status, Shape::StatusWord],
                        _ => return Vec::new(),
                    };
                    name_of(n)
                        .map(|n| vec![(n.to_owned(), Narrow::Only(kinds))])
                        .unwrap_or_default()
                }
                _ => Vec::new(),
            }
        }
        Expression::BinaryOperator {
            lhs,
            binop: BinOp::And(_),
            rhs,
        } if truthy => {
            let mut all = narrows(lhs, true);
            all.extend(narrows(rhs, true));
            all
        }
        Expression::BinaryOperator {
            lhs,
            binop: BinOp::Or(_),
            rhs,
        } if !truthy => {
            let mut all = narrows(lhs, false);
            all.extend(narrows(rhs, false));
            all
        }
        Expression::BinaryOperator { lhs, binop, rhs }
            if matches!(binop, BinOp::TwoEqual(_) | BinOp::TildeEqual(_)) =>
        {
            let equal = matches!(binop, BinOp::TwoEqual(_)) == truthy;
            // `type(v) == 'table'`
            let typed = |call: &Expression, text: &Expression| {
                let name = type_of(call)?;
                Narrow::of_type(literal_string(text)?, equal).map(|n| vec![(name, n)])
            };
            if let Some(found) = typed(lhs, rhs).or_else(|| typed(rhs, lhs)) {
                return found;
            }
            let (name, other) = match (local(lhs), local(rhs)) {
                (Some(n), _) => (n, rhs.as_ref()),
                (None, Some(n)) => (n, lhs.as_ref()),
                (None, None) => return Vec::new(),
            };
            let falsy = is_symbol(other, Symbol::False) || is_symbol(other, Symbol::Nil);
            let literal = never_false(other);
            match (falsy, literal, equal) {
                // `v == false` true: v is nil or false; false: it is neither.
                (true, _, true) => vec![(name, Narrow::nil())],
                (true, _, false) | (_, true, true) => vec![(name, Narrow::not_nil())],
                _ => Vec::new(),
            }
        }
        _ => Vec::new(),
    }
}

/// An expression that is never nil or false whatever the script's state: a literal
/// string, number or `true`, an element of `KEYS` or `ARGV` that is there (`KEYS[1]`, a
/// string), a concatenation; so `v == ARGV[1]` true means `v` is not nil.
fn never_false(expr: &Expression) -> bool {
    match expr {
        Expression::String(_)
        | Expression::Number(_)
        | Expression::BinaryOperator {
            binop: BinOp::TwoDots(_),
            ..
        } => true,
        Expression::Parentheses { expression, .. } => never_false(expression),
        Expression::Var(Var::Expression(v)) => {
            matches!(v.prefix(), Prefix::Name(t) if matches!(name_of(t), Some("KEYS" | "ARGV")))
                && matches!(
                    v.suffixes().collect::<Vec<_>>().as_slice(),
                    [Suffix::Index(Index::Brackets { .. })]
                )
        }
        _ => is_symbol(expr, Symbol::True),
    }
}

/// The local `v` of `type(v)`.
fn type_of(expr: &Expression) -> Option<String> {
    let Expression::FunctionCall(call) = expr else {
        return None;
    };
    let Prefix::Name(f) = call.prefix() else {
        return None;
    };
    if name_of(f) != Some("type") {
        return None;
    }
    let suffixes: Vec<&Suffix> = call.suffixes().collect();
    let [Suffix::Call(Call::AnonymousCall(args))] = suffixes.as_slice() else {
        return None;
    };
    let FunctionArgs::Parentheses { arguments, .. } = args.as_ref() else {
        return None;
    };
    match arguments.iter().collect::<Vec<_>>().as_slice() {
        [Expression::Var(Var::Name(n))] => name_of(n).map(str::to_owned),
        _ => None,
    }
}
