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

/// A call of `table.member(...)` from Redis's Lua libraries (Valkey's `server` is
/// `redis`). What each gives is read from the libraries' C sources (Redis's
/// `deps/lua/src`, `script_lua.c`, `eval.c`; Valkey's `src/modules/lua`); a function
/// that returns nothing gives nil, as the reply of a script that returns it.
pub(super) fn library(table: &str, member: &str, args: &[(Value, Option<String>)]) -> Value {
    let first = args.first().map(|(v, _)| v.shapes());
    let table = if table == "server" { "redis" } else { table };
    match (table, member) {
        ("redis", "error_reply") => data(Shape::Error),
        ("redis", "status_reply") => data(match &first {
            Some(s) if !s.is_empty() && s.iter().all(|k| k == Shape::Word) => Shape::StatusWord,
            _ => Shape::Status,
        }),
        ("redis", "sha1hex")
        | ("cjson", "encode")
        | ("cmsgpack" | "struct", "pack")
        | ("bit", "tohex")
        | ("table", "concat")
        | (
            "string",
            "format" | "sub" | "rep" | "lower" | "upper" | "char" | "reverse" | "gsub" | "dump",
        ) => data(Shape::Bulk),
        ("string", "len")
        | ("table", "getn")
        | ("math", "floor" | "ceil")
        | (
            "bit",
            "band" | "bor" | "bxor" | "bnot" | "lshift" | "rshift" | "arshift" | "tobit" | "rol"
            | "ror" | "bswap",
        )
        | ("struct", "size")
        // The offset where the next value starts (-1 at the end), then the values.
        | ("cmsgpack", "unpack_one" | "unpack_limit")
        // Always true (deprecated since Redis 7.0; scripts replicate their effects).
        | ("redis", "replicate_commands") => data(Shape::Integer),
        // No value when nothing matched, or for an empty string.
        ("string", "byte" | "find") => Value::Data(Shapes::of(Shape::Integer).with(Shape::Nil)),
        // A boolean.
        // A boolean.
        ("redis", "breakpoint" | "acl_check_cmd") => {
            Value::Data(Shapes::of(Shape::Integer).with(Shape::False))
        }
        // Nothing.
        ("redis", "log" | "setresp" | "set_repl" | "debug") | ("table", "insert" | "sort") => {
            data(Shape::Nil)
        }
        ("math", "max" | "min" | "abs") => {
            let all: Vec<Shapes> = args.iter().map(|(v, _)| v.shapes()).collect();
            arithmetic(&all)
        }
        ("math", "random") if !args.is_empty() => data(Shape::Integer),
        ("math", _) | ("os", "clock") => data(Shape::Truncated),
        // Not known: among them what a decoder finds in its text, one value or several
        // (`cjson.decode`; `cmsgpack.unpack` gives every value packed in it,
        // `struct.unpack` each field then the next position).
        _ => Value::Data(Shapes::unknown()),
    }
}

/// A field of Redis's Lua libraries, read without a call (`cjson.null`,
/// `redis.REDIS_VERSION`); `None` for one the walk does not know.
pub(super) fn field(table: &str, member: &str) -> Option<Value> {
    let table = if table == "server" { "redis" } else { table };
    Some(match (table, member) {
        // A light userdata, which Redis sends as nil.
        ("cjson", "null") => data(Shape::Nil),
        // "7.2.4": never a number.
        ("redis", "REDIS_VERSION" | "VALKEY_VERSION" | "SERVER_NAME") => data(Shape::Word),
        ("redis", "REDIS_VERSION_NUM" | "VALKEY_VERSION_NUM") => data(Shape::Integer),
        ("redis", m) if m.starts_with("LOG_") || m.starts_with("REPL_") => data(Shape::Integer),
        ("math", "pi" | "huge") => data(Shape::Truncated),
        _ => return None,
    })
}

/// A call of a global function of Redis's Lua.
pub(super) fn global(name: &str, args: &[(Value, Option<String>)]) -> Value {
    let first = args.first().map(|(v, _)| v.shapes());
    match name {
        "tostring" => data(Shape::Bulk),
        // "nil", "number", "string", "table"...: never a number.
        "type" => data(Shape::Word),
        "tonumber" => match first {
            Some(s) if !s.is_empty() && s.iter().all(|k| k == Shape::Integer) => {
                data(Shape::Integer)
            }
            // nil for text that is not a number: the analysis cannot tell, so not nil.
            _ => Value::Data(Shapes::of(Shape::Truncated).with(Shape::Unknown)),
        },
        // Its first argument, which it returned only when it was neither nil nor false.
        "assert" => match first {
            Some(s) if !s.is_empty() => Value::Data(s.without(Shape::Nil).without(Shape::False)),
            _ => Value::Data(Shapes::unknown()),
        },
        // A boolean first.
        "pcall" | "xpcall" | "rawequal" => {
            Value::Data(Shapes::of(Shape::Integer).with(Shape::False))
        }
        "gcinfo" => data(Shape::Integer),
        _ => Value::Data(Shapes::unknown()),
    }
}

#[cfg(test)]
mod tests {
    use crate::lua::analyze;
    use crate::reply::{Declared, Return};

    /// The shapes of each return, in the compact form.
    fn shapes(source: &str) -> Vec<String> {
        let analysis = analyze(source);
        assert!(analysis.parsed, "{:?}", analysis.problems);
        analysis.returns.iter().map(|r| r.shapes.code()).collect()
    }

    /// No declared type the check knows refuses what `source` replies.
    fn refused_by_none(source: &str) {
        let all = Return::all(&analyze(source).returns);
        let types = [
            Declared::Text,
            Declared::Bytes,
            Declared::Integer,
            Declared::Float,
            Declared::Bool,
            Declared::List(Box::new(Declared::Text)),
            Declared::Map(Box::new(Declared::Text), Box::new(Declared::Text)),
            Declared::Tuple(vec![Declared::Integer, Declared::Text]),
        ];
        for declared in types {
            assert_eq!(
                declared.refusal("T", &all),
                None,
                "{declared:?} for {source}"
            );
        }
    }

    #[test]
    fn cmsgpack_pack_is_a_bulk_string_and_what_it_unpacks_is_not_known() {
        assert_eq!(shapes("return cmsgpack.pack({1, 'a'}, 2)"), ["b"]);
        // Every value packed, one return each: the first, whatever it is.
        for script in [
            "return cmsgpack.unpack(ARGV[1])",
            "local a, b = cmsgpack.unpack(ARGV[1])\nreturn b",
            "local t = cmsgpack.unpack(ARGV[1])\nreturn t[1]",
            "local _, v = cmsgpack.unpack_one(ARGV[1])\nreturn v",
            "local _, v = cmsgpack.unpack_limit(ARGV[1], 1)\nreturn v",
        ] {
            assert_eq!(shapes(script), ["?"], "{script}");
            refused_by_none(script);
        }
        assert_eq!(shapes("return {cmsgpack.unpack(ARGV[1])}"), ["[?]"]);
        // unpack_one and unpack_limit give the next offset first (-1 at the end).
        assert_eq!(shapes("return cmsgpack.unpack_one(ARGV[1])"), ["i"]);
        assert_eq!(shapes("return cmsgpack.unpack_limit(ARGV[1], 2, 0)"), ["i"]);
    }

    #[test]
    fn cjson_decode_is_not_known_and_its_null_is_nil() {
        for script in [
            "return cjson.decode(ARGV[1])",
            "local v = cjson.decode(ARGV[1])\nreturn v.id",
        ] {
            assert_eq!(shapes(script), ["?"], "{script}");
            refused_by_none(script);
        }
        assert_eq!(shapes("return cjson.encode(cjson.decode(ARGV[1]))"), ["b"]);
        assert_eq!(shapes("return cjson.null"), ["n"]);
        // A local named like the library is the local.
        assert_eq!(shapes("local cjson = {null = 1}\nreturn cjson.null"), ["?"]);
    }

    #[test]
    fn struct_unpack_is_not_known_and_pack_and_size_are() {
        for script in [
            "return struct.unpack('>I4', ARGV[1])",
            "local n, next = struct.unpack('>I4', ARGV[1])\nreturn next",
            "return struct.unpack('c0', ARGV[1])",
        ] {
            assert_eq!(shapes(script), ["?"], "{script}");
            refused_by_none(script);
        }
        assert_eq!(shapes("return struct.pack('>I4', 7)"), ["b"]);
        assert_eq!(shapes("return struct.size('>I4')"), ["i"]);
    }

    #[test]
    fn bit_string_table_and_os_functions_give_their_shapes() {
        assert_eq!(shapes("return bit.rol(1, 2)"), ["i"]);
        assert_eq!(shapes("return bit.bswap(1)"), ["i"]);
        assert_eq!(shapes("return bit.tohex(255)"), ["b"]);
        assert_eq!(shapes("return string.byte(ARGV[1])"), ["ni"]);
        assert_eq!(shapes("return string.find(ARGV[1], 'x')"), ["ni"]);
        assert_eq!(
            shapes("local s = ARGV[1]\nreturn s:find('x', 1, true)"),
            ["ni"]
        );
        assert_eq!(shapes("return string.dump(function() end)"), ["b"]);
        assert_eq!(shapes("local t = {}\nreturn table.insert(t, 1)"), ["n"]);
        assert_eq!(shapes("return os.clock()"), ["f"]);
        assert_eq!(shapes("return math.pi"), ["f"]);
    }

    #[test]
    fn redis_functions_and_fields_give_their_shapes() {
        assert_eq!(shapes("return redis.log(redis.LOG_WARNING, 'x')"), ["n"]);
        assert_eq!(shapes("return redis.setresp(2)"), ["n"]);
        assert_eq!(shapes("return redis.set_repl(redis.REPL_ALL)"), ["n"]);
        assert_eq!(shapes("return redis.replicate_commands()"), ["i"]);
        assert_eq!(shapes("return redis.acl_check_cmd('GET', 'k')"), ["ni"]);
        assert_eq!(shapes("return redis.REDIS_VERSION"), ["w"]);
        assert_eq!(shapes("return redis.REDIS_VERSION_NUM"), ["i"]);
        assert_eq!(shapes("return redis.LOG_NOTICE"), ["i"]);
        // Valkey's `server` is `redis`.
        assert_eq!(shapes("return server.call('GET', KEYS[1])"), ["nb"]);
        assert_eq!(
            shapes("local c = server.pcall\nreturn c('INCR', KEYS[1])"),
            ["ie"]
        );
        assert_eq!(shapes("return server.error_reply('no')"), ["e"]);
    }

    #[test]
    fn base_functions_give_their_shapes() {
        // A type's name is never a number.
        assert_eq!(shapes("return type(ARGV[1])"), ["w"]);
        // assert returns its argument, which it checked is neither nil nor false.
        assert_eq!(shapes("return assert(redis.call('GET', KEYS[1]))"), ["b"]);
        assert_eq!(shapes("return assert(ARGV[1], 'no value')"), ["?"]);
        assert_eq!(shapes("return xpcall(error, error)"), ["ni"]);
        assert_eq!(shapes("return rawequal(ARGV[1], ARGV[2])"), ["ni"]);
    }
}
