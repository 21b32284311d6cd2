//! Expressions: literals, operators, calls (commands, library functions, local
//! functions) and table constructors, by the shapes their value would have as a reply.

use full_moon::ast::{
    BinOp, Call, Expression, Field, FunctionArgs, FunctionCall, Index, Prefix, Suffix, UnOp, Var,
};
use full_moon::tokenizer::{Symbol, TokenType};

use super::library::{arithmetic, falsy, field, global, library, may_be_false, may_be_true, not};
use super::{Resp, Value, Walk, data, is_symbol, literal_string, name_of, string_of, text_shape};
use crate::reply::Protocol;
use crate::reply::shape::{Shape, Shapes};

impl Walk {
    /// `lhs binop rhs`: `and` / `or` by truthiness, `..` a string, arithmetic a number,
    /// a comparison true or false.
    pub(super) fn binary(&mut self, lhs: &Expression, binop: &BinOp, rhs: &Expression) -> Value {
        let left = self.expr(lhs);
        match binop {
            BinOp::And(_) => {
                let l = left.shapes();
                let r = self.expr(rhs);
                if may_be_false(&l) && may_be_true(&l) {
                    Value::Data(r.shapes().union(&falsy(&l)))
                } else if may_be_true(&l) {
                    r
                } else {
                    left
                }
            }
            BinOp::Or(_) => {
                let l = left.shapes();
                let r = self.expr(rhs);
                if !may_be_false(&l) {
                    left
                } else if !may_be_true(&l) {
                    r
                } else {
                    Value::Data(
                        l.without(Shape::Nil)
                            .without(Shape::False)
                            .union(&r.shapes()),
                    )
                }
            }
            BinOp::TwoDots(_) => {
                self.expr(rhs);
                data(Shape::Bulk)
            }
            BinOp::Plus(_) | BinOp::Minus(_) | BinOp::Star(_) | BinOp::Percent(_) => {
                let r = self.expr(rhs).shapes();
                arithmetic(&[left.shapes(), r])
            }
            BinOp::Slash(_) | BinOp::Caret(_) => {
                self.expr(rhs);
                data(Shape::Truncated)
            }
            BinOp::TwoEqual(_)
            | BinOp::TildeEqual(_)
            | BinOp::LessThan(_)
            | BinOp::LessThanEqual(_)
            | BinOp::GreaterThan(_)
            | BinOp::GreaterThanEqual(_) => {
                self.expr(rhs);
                Value::Data(Shapes::of(Shape::Integer).with(Shape::False))
            }
            _ => {
                self.expr(rhs);
                Value::Data(Shapes::unknown())
            }
        }
    }

    pub(super) fn expr(&mut self, expr: &Expression) -> Value {
        match expr {
            Expression::Number(n) => {
                let text = n.token().to_string();
                let whole = text.starts_with("0x")
                    || text.starts_with("0X")
                    || text.parse::<f64>().is_ok_and(|v| v.fract() == 0.0);
                data(if whole {
                    Shape::Integer
                } else {
                    Shape::Truncated
                })
            }
            Expression::String(s) => data(string_of(s).map_or(Shape::Bulk, text_shape)),
            Expression::Symbol(s) => match s.token().token_type() {
                TokenType::Symbol {
                    symbol: Symbol::True,
                } => data(Shape::Integer),
                TokenType::Symbol {
                    symbol: Symbol::False,
                } => data(Shape::False),
                TokenType::Symbol {
                    symbol: Symbol::Nil,
                } => data(Shape::Nil),
                _ => Value::Data(Shapes::unknown()),
            },
            Expression::Parentheses { expression, .. } => self.expr(expression),
            Expression::UnaryOperator { unop, expression } => {
                let inner = self.expr(expression).shapes();
                match unop {
                    UnOp::Not(_) => Value::Data(not(&inner)),
                    UnOp::Minus(_) => arithmetic(&[inner]),
                    UnOp::Hash(_) => data(Shape::Integer),
                    _ => Value::Data(Shapes::unknown()),
                }
            }
            Expression::BinaryOperator { lhs, binop, rhs } => self.binary(lhs, binop, rhs),
            Expression::Function(f) => Value::Function(self.body(f.body())),
            Expression::FunctionCall(call) => self.call(call),
            Expression::TableConstructor(t) => self.table(t),
            Expression::Var(Var::Name(name)) => name_of(name)
                .and_then(|n| self.find(n))
                .map_or_else(|| Value::Data(Shapes::unknown()), |l| l.value.clone()),
            Expression::Var(Var::Expression(v)) => {
                let suffixes: Vec<&Suffix> = v.suffixes().collect();
                if let (Prefix::Name(table), [Suffix::Index(Index::Dot { name, .. })]) =
                    (v.prefix(), suffixes.as_slice())
                    && let Some(table) = name_of(table)
                    && self.find(table).is_none()
                {
                    let member = name_of(name).unwrap_or_default();
                    match (table, member) {
                        ("redis" | "server", "call") => return Value::Call(false),
                        ("redis" | "server", "pcall") => return Value::Call(true),
                        // `pcall(redis.setresp, 3)`, `local f = redis.setresp`: may switch.
                        ("redis" | "server", "setresp") => self.set_protocol(Resp::EITHER),
                        _ => {}
                    }
                    if let Some(value) = field(table, member) {
                        return value;
                    }
                }
                if let Prefix::Expression(e) = v.prefix() {
                    self.expr(e);
                }
                for s in suffixes {
                    self.suffix_args(s);
                }
                // An element or a field: which one is not followed.
                Value::Data(Shapes::unknown())
            }
            _ => Value::Data(Shapes::unknown()),
        }
    }

    /// Walks the expressions inside a suffix (an index, a call's arguments).
    pub(super) fn suffix_args(&mut self, suffix: &Suffix) {
        match suffix {
            Suffix::Index(Index::Brackets { expression, .. }) => {
                self.expr(expression);
            }
            Suffix::Call(Call::AnonymousCall(args)) => {
                self.args(args);
            }
            Suffix::Call(Call::MethodCall(m)) => {
                self.args(m.args());
            }
            _ => {}
        }
    }

    /// A call's arguments, each walked, by value.
    pub(super) fn args(&mut self, args: &FunctionArgs) -> Vec<(Value, Option<String>)> {
        match args {
            FunctionArgs::Parentheses { arguments, .. } => arguments
                .iter()
                .map(|e| {
                    let local = match e {
                        Expression::Var(Var::Name(n)) => name_of(n).map(str::to_owned),
                        _ => None,
                    };
                    (self.expr(e), local)
                })
                .collect(),
            FunctionArgs::String(s) => {
                vec![(data(string_of(s).map_or(Shape::Bulk, text_shape)), None)]
            }
            FunctionArgs::TableConstructor(t) => vec![(self.table(t), None)],
            _ => Vec::new(),
        }
    }

    pub(super) fn call(&mut self, call: &FunctionCall) -> Value {
        let suffixes: Vec<&Suffix> = call.suffixes().collect();
        let (callee, rest): (Value, &[&Suffix]) = match (call.prefix(), suffixes.as_slice()) {
            // `lib.member(...)`: a library function, by name.
            (
                Prefix::Name(table),
                [
                    Suffix::Index(Index::Dot { name, .. }),
                    Suffix::Call(Call::AnonymousCall(args)),
                    rest @ ..,
                ],
            ) if name_of(table).is_some_and(|t| self.find(t).is_none()) => {
                let table = name_of(table).unwrap_or_default();
                let member = name_of(name).unwrap_or_default();
                let walked = self.args(args);
                if let ("table", "insert", [(_, Some(local)), (value, _)]) =
                    (table, member, walked.as_slice())
                    && !open_arguments(args)
                {
                    // `table.insert(t, x)` appends.
                    self.append(local, value);
                } else if table == "table" {
                    // table.insert at a place, table.remove, table.sort change the table.
                    for (_, local) in &walked {
                        if let Some(local) = local {
                            self.widen(local);
                        }
                    }
                }
                let value = match (table, member) {
                    ("redis" | "server", "call") => self.command(args, false),
                    ("redis" | "server", "pcall") => self.command(args, true),
                    ("redis" | "server", "setresp") => {
                        self.set_protocol(switched_to(args));
                        library(table, member, &walked)
                    }
                    _ => library(table, member, &walked),
                };
                (value, rest)
            }
            (Prefix::Name(name), [Suffix::Call(Call::AnonymousCall(args)), rest @ ..]) => {
                let name = name_of(name).unwrap_or_default();
                let callee = self.find(name).map(|l| l.value.clone());
                let walked = self.args(args);
                let value = match callee {
                    Some(Value::Call(pcall)) => self.command(args, pcall),
                    Some(Value::Function(shapes)) => {
                        // The function may change a table it is given.
                        for (_, local) in &walked {
                            if let Some(local) = local {
                                self.widen(local);
                            }
                        }
                        Value::Data(shapes)
                    }
                    Some(Value::Data(_) | Value::Resp(_)) => Value::Data(Shapes::unknown()),
                    None => {
                        if name == "rawset" {
                            for (_, local) in &walked {
                                if let Some(local) = local {
                                    self.widen(local);
                                }
                            }
                        }
                        global(name, &walked)
                    }
                };
                (value, rest)
            }
            (Prefix::Name(_), [Suffix::Call(Call::MethodCall(m)), rest @ ..]) => {
                // `s:sub(1, 2)`: a string method.
                self.args(m.args());
                let method = name_of(m.name()).unwrap_or_default();
                (library("string", method, &[]), rest)
            }
            (prefix, all) => {
                if let Prefix::Expression(e) = prefix {
                    self.expr(e);
                }
                for s in all {
                    if let Suffix::Call(Call::AnonymousCall(args)) = s {
                        for (_, local) in self.args(args) {
                            if let Some(local) = local {
                                self.widen(&local);
                            }
                        }
                    } else {
                        self.suffix_args(s);
                    }
                }
                return Value::Data(Shapes::unknown());
            }
        };
        if rest.is_empty() {
            callee
        } else {
            for s in rest {
                self.suffix_args(s);
            }
            Value::Data(Shapes::unknown())
        }
    }

    /// `redis.call(...)` / `redis.pcall(...)`: the command's reply as Lua hands it back,
    /// when its name is a literal the reply table knows.
    pub(super) fn command(&mut self, args: &FunctionArgs, pcall: bool) -> Value {
        let FunctionArgs::Parentheses { arguments, .. } = args else {
            return Value::Data(Shapes::unknown());
        };
        let given: Vec<&Expression> = arguments.iter().collect();
        let call: Vec<Option<String>> = given
            .iter()
            .map(|e| match e {
                Expression::Number(n) => Some(n.token().to_string()),
                _ => literal_string(e).map(str::to_owned),
            })
            .collect();
        let open = given.last().is_some_and(|e| {
            matches!(e, Expression::FunctionCall(_)) || is_symbol(e, Symbol::Ellipsis)
        });
        let resp = self.protocol();
        let mut replies = Vec::new();
        if resp.two {
            // RESP2's null is Lua's false.
            replies.push(
                crate::commands::reply_to(&call, open, Protocol::Resp2)
                    .map(|s| s.replaced(Shape::Nil, &Shapes::of(Shape::False))),
            );
        }
        if resp.three {
            replies.push(crate::commands::reply_to(&call, open, Protocol::Resp3));
        }
        let mut shapes = replies
            .into_iter()
            .try_fold(Shapes::none(), |all, s| Some(all.union(&s?)))
            .unwrap_or_else(Shapes::unknown);
        if self.reads_written(&given) {
            shapes = shapes.without(Shape::Nil).without(Shape::False);
        }
        Value::Data(if pcall {
            shapes.with(Shape::Error)
        } else {
            shapes
        })
    }

    /// A table constructor: an array of its positional elements up to the first `nil`,
    /// or the status, error or RESP3 form its field names.
    pub(super) fn table(&mut self, table: &full_moon::ast::TableConstructor) -> Value {
        let mut elements = Shapes::none();
        let mut kind = None;
        let mut cut = false;
        let fields: Vec<&Field> = table.fields().iter().collect();
        for (i, field) in fields.iter().enumerate() {
            match field {
                Field::NameKey { key, value, .. } => {
                    let v = self.expr(value).shapes();
                    match name_of(key) {
                        Some("err") => kind = Some(Shapes::of(Shape::Error)),
                        Some("ok") if kind.is_none() => {
                            let word = v.iter().all(|s| s == Shape::Word) && !v.is_empty();
                            kind = Some(Shapes::of(if word {
                                Shape::StatusWord
                            } else {
                                Shape::Status
                            }));
                        }
                        // RESP3's forms, which Redis 7 and Valkey reply to a RESP2 caller as
                        // a bulk string (`{double = 1.5}` as "1.5"), or an array (a map's
                        // pairs, flat; a set's members).
                        Some(
                            form @ ("double" | "map" | "set" | "big_number" | "verbatim_string"),
                        ) if kind.is_none() => {
                            kind = Some(resp3_form(form, &v));
                        }
                        _ => {}
                    }
                }
                Field::ExpressionKey { key, value, .. } => {
                    self.expr(key);
                    self.expr(value);
                    elements = elements.with(Shape::Unknown);
                }
                Field::NoKey(value) => {
                    let v = self.expr(value);
                    if cut {
                        continue;
                    }
                    if is_symbol(value, Symbol::Nil) {
                        cut = true;
                        continue;
                    }
                    let last = i + 1 == fields.len();
                    let mut shapes = v.shapes();
                    if last && matches!(value, Expression::FunctionCall(_)) {
                        // A call's further results are elements too.
                        shapes = shapes.with(Shape::Unknown);
                    }
                    elements = elements.union(&shapes);
                }
                _ => elements = elements.with(Shape::Unknown),
            }
        }
        Value::Data(kind.unwrap_or_else(|| Shapes::array(elements)))
    }
}

/// The last argument may give several values (a call, `...`).
fn open_arguments(args: &FunctionArgs) -> bool {
    match args {
        FunctionArgs::Parentheses { arguments, .. } => arguments.iter().last().is_some_and(|e| {
            matches!(e, Expression::FunctionCall(_)) || is_symbol(e, Symbol::Ellipsis)
        }),
        _ => false,
    }
}

/// What `redis.setresp(n)` switches to: RESP3 for a literal 3, RESP2 for 2, either when
/// the argument is not a literal.
fn switched_to(args: &FunctionArgs) -> Resp {
    let FunctionArgs::Parentheses { arguments, .. } = args else {
        return Resp::EITHER;
    };
    match arguments.iter().next() {
        Some(Expression::Number(n)) => match n.token().to_string().trim() {
            "3" => Resp::THREE,
            "2" => Resp::TWO,
            _ => Resp::EITHER,
        },
        _ => Resp::EITHER,
    }
}

/// What a table with the RESP3 field `form` replies to a RESP2 caller, its value having
/// `value`'s shapes; unknown when the value is not of the kind the form needs (Redis then
/// reads the table as an array). Redis 6.2 reads no `big_number` or `verbatim_string`:
/// it replies the table as an array, empty.
fn resp3_form(form: &str, value: &Shapes) -> Shapes {
    let only = |kinds: &[Shape]| !value.is_empty() && value.iter().all(|k| kinds.contains(&k));
    let text_or_empty = || Shapes::of(Shape::Bulk).union(&Shapes::array(Shapes::none()));
    match form {
        "double" if only(&[Shape::Integer, Shape::Truncated]) => Shapes::of(Shape::Bulk),
        "big_number" if only(&[Shape::Bulk, Shape::Word]) => text_or_empty(),
        "verbatim_string" if only(&[Shape::Array]) => text_or_empty(),
        "map" | "set" if only(&[Shape::Array]) => Shapes::array(Shapes::unknown()),
        _ => Shapes::unknown(),
    }
}
