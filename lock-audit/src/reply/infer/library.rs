//! Redis's Lua libraries and Lua's own rules: what a library call, arithmetic, `not`,
//! `and` and `or` give.

use super::{Value, data};
use crate::reply::shape::{Shape, Shapes};

/// Shapes of the result of arithmetic on operands of `shapes`: an integer only when every
/// operand is one.
pub(super) fn arithmetic(operands: &[Shapes]) -> Value {
    let integers = operands
        .iter()
        .all(|s| !s.is_empty() && s.iter().all(|k| k == Shape::Integer));
    data(if integers {
        Shape::Integer
    } else {
        Shape::Truncated
    })
}

/// Nil, false and unknown values may be false.
pub(super) fn may_be_false(shapes: &Shapes) -> bool {
    shapes.contains(Shape::Nil)
        || shapes.contains(Shape::False)
        || shapes.contains(Shape::Unknown)
        || shapes.is_empty()
}

pub(super) fn may_be_true(shapes: &Shapes) -> bool {
    !shapes.without(Shape::Nil).without(Shape::False).is_empty() || shapes.is_empty()
}

/// The values of `shapes` that are false in a test (`nil`, `false`): what `x and y`
/// gives when `x` is one.
pub(super) fn falsy(shapes: &Shapes) -> Shapes {
    let unknown = shapes.contains(Shape::Unknown) || shapes.is_empty();
    let mut out = Shapes::none();
    if unknown || shapes.contains(Shape::Nil) {
        out = out.with(Shape::Nil);
    }
    if unknown || shapes.contains(Shape::False) {
        out = out.with(Shape::False);
    }
    out
}

/// `not x`: true (1) when `x` may be false, false when it may be true.
pub(super) fn not(inner: &Shapes) -> Shapes {
    let mut out = Shapes::none();
    if may_be_false(inner) {
        out = out.with(Shape::Integer);
    }
    if may_be_true(inner) {
        out = out.with(Shape::False);
    }
    out
}

/// A call of `table.member(...)` from Redis's Lua libraries.
pub(super) fn library(table: &str, member: &str, args: &[(Value, Option<String>)]) -> Value {
    let first = args.first().map(|(v, _)| v.shapes());
    match (table, member) {
        ("redis", "error_reply") => data(Shape::Error),
        ("redis", "status_reply") => data(match &first {
            Some(s) if !s.is_empty() && s.iter().all(|k| k == Shape::Word) => Shape::StatusWord,
            _ => Shape::Status,
        }),
        ("redis", "sha1hex")
        | ("cjson" | "cmsgpack", "encode" | "pack")
        | ("struct", "pack")
        | ("bit", "tohex")
        | ("table", "concat")
        | ("string", "format" | "sub" | "rep" | "lower" | "upper" | "char" | "reverse" | "gsub") => {
            data(Shape::Bulk)
        }
        ("string", "len")
        | ("table", "getn")
        | ("math", "floor" | "ceil")
        | ("bit", "band" | "bor" | "bxor" | "bnot" | "lshift" | "rshift" | "arshift" | "tobit") => {
            data(Shape::Integer)
        }
        ("math", "max" | "min" | "abs") => {
            let all: Vec<Shapes> = args.iter().map(|(v, _)| v.shapes()).collect();
            arithmetic(&all)
        }
        ("math", "random") if !args.is_empty() => data(Shape::Integer),
        ("math", _) => data(Shape::Truncated),
        _ => Value::Data(Shapes::unknown()),
    }
}

/// A call of a global function of Redis's Lua.
pub(super) fn global(name: &str, args: &[(Value, Option<String>)]) -> Value {
    let first = args.first().map(|(v, _)| v.shapes());
    match name {
        "tostring" | "type" => data(Shape::Bulk),
        "tonumber" => match first {
            Some(s) if !s.is_empty() && s.iter().all(|k| k == Shape::Integer) => {
                data(Shape::Integer)
            }
            // nil for text that is not a number: the analysis cannot tell, so not nil.
            _ => Value::Data(Shapes::of(Shape::Truncated).with(Shape::Unknown)),
        },
        "pcall" => Value::Data(Shapes::of(Shape::Integer).with(Shape::False)),
        _ => Value::Data(Shapes::unknown()),
    }
}
