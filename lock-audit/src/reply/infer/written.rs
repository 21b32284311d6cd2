//! What a block certainly wrote before a read: `HSET k f v` then `HGET k f` is not nil.

use full_moon::ast::{
    BinOp, Call, Expression, FunctionArgs, FunctionCall, Index, Prefix, Suffix, UnOp, Var,
};

use super::{Fact, Value, Walk, literal_string, name_of};

impl Walk {
    /// The text of a command's argument, for comparing a read with a write: a literal's
    /// content, a local's declaring expression, or the expression without spaces.
    pub(super) fn text_of(&mut self, expr: &Expression) -> String {
        if let Some(text) = literal_string(expr) {
            return format!("\"{text}\"");
        }
        if let Expression::Var(Var::Name(n)) = expr
            && let Some(name) = name_of(n)
            && let Some(text) = self.find(name).and_then(|l| l.text.clone())
        {
            return text;
        }
        expr.to_string().split_whitespace().collect()
    }

    /// The arguments of `redis.call(...)` / `redis.pcall(...)` or an alias of them.
    pub(super) fn command_call<'a>(
        &mut self,
        call: &'a FunctionCall,
    ) -> Option<Vec<&'a Expression>> {
        let suffixes: Vec<&Suffix> = call.suffixes().collect();
        let args = match (call.prefix(), suffixes.as_slice()) {
            (
                Prefix::Name(table),
                [
                    Suffix::Index(Index::Dot { name, .. }),
                    Suffix::Call(Call::AnonymousCall(args)),
                ],
            ) if name_of(table) == Some("redis")
                && self.find("redis").is_none()
                && matches!(name_of(name), Some("call" | "pcall")) =>
            {
                args
            }
            (Prefix::Name(alias), [Suffix::Call(Call::AnonymousCall(args))])
                if name_of(alias)
                    .and_then(|a| self.find(a))
                    .is_some_and(|l| matches!(l.value, Value::Call(_))) =>
            {
                args
            }
            _ => return None,
        };
        match args.as_ref() {
            FunctionArgs::Parentheses { arguments, .. } => Some(arguments.iter().collect()),
            _ => None,
        }
    }

    /// Records what a command call certainly writes, for the reads after it in the block.
    pub(super) fn note_writes(&mut self, call: &FunctionCall) {
        let Some(args) = self.command_call(call) else {
            return;
        };
        let Some(name) = args.first().and_then(|a| literal_string(a)) else {
            return;
        };
        let Some(key) = args.get(1) else { return };
        let name = name.to_ascii_uppercase();
        let key = self.text_of(key);
        let mut facts: Vec<Fact> = Vec::new();
        match name.as_str() {
            // SET ... XX writes only a key that exists; a computed first option may be XX.
            "SET" => {
                let xx = args
                    .iter()
                    .skip(3)
                    .any(|a| literal_string(a).is_some_and(|t| t.eq_ignore_ascii_case("XX")));
                let computed = args.get(3).is_some_and(|a| literal_string(a).is_none());
                if !xx && !computed {
                    facts.push((key, None));
                }
            }
            "SETNX" | "SETEX" | "PSETEX" | "GETSET" | "INCR" | "INCRBY" | "INCRBYFLOAT"
            | "DECR" | "DECRBY" | "APPEND" => facts.push((key, None)),
            "HSET" | "HMSET" => {
                for field in args.iter().skip(2).step_by(2) {
                    let field = self.text_of(field);
                    facts.push((key.clone(), Some(field)));
                }
            }
            "HSETNX" | "HINCRBY" | "HINCRBYFLOAT" => {
                if let Some(field) = args.get(2) {
                    let field = self.text_of(field);
                    facts.push((key, Some(field)));
                }
            }
            _ => {}
        }
        if let Some(block) = self.written.last_mut() {
            block.extend(facts);
        }
    }

    /// A `GET` or `HGET` of what the block (or one around it) wrote before it.
    pub(super) fn reads_written(&mut self, args: &[&Expression]) -> bool {
        let Some(name) = args.first().and_then(|a| literal_string(a)) else {
            return false;
        };
        let fact = match (name.to_ascii_uppercase().as_str(), args.get(1), args.get(2)) {
            ("GET", Some(key), None) => (self.text_of(key), None),
            ("HGET", Some(key), Some(field)) => (self.text_of(key), Some(self.text_of(field))),
            _ => return false,
        };
        self.written.iter().flatten().any(|f| *f == fact)
    }

    /// What `condition` says exists when it is `truthy` (or false): `EXISTS k == 1`,
    /// `HEXISTS k f == 1` (and `~= 0`, `> 0`), `== 0` when false, through `not`, `and`
    /// (when true) and `or` (when false).
    pub(super) fn tested_exists(&mut self, condition: &Expression, truthy: bool) -> Vec<Fact> {
        match condition {
            Expression::Parentheses { expression, .. } => self.tested_exists(expression, truthy),
            Expression::UnaryOperator {
                unop: UnOp::Not(_),
                expression,
            } => self.tested_exists(expression, !truthy),
            Expression::BinaryOperator {
                lhs,
                binop: BinOp::And(_),
                rhs,
            } if truthy => {
                let mut all = self.tested_exists(lhs, true);
                all.extend(self.tested_exists(rhs, true));
                all
            }
            Expression::BinaryOperator {
                lhs,
                binop: BinOp::Or(_),
                rhs,
            } if !truthy => {
                let mut all = self.tested_exists(lhs, false);
                all.extend(self.tested_exists(rhs, false));
                all
            }
            Expression::BinaryOperator { lhs, binop, rhs } => {
                let Expression::FunctionCall(call) = lhs.as_ref() else {
                    return Vec::new();
                };
                let Expression::Number(n) = rhs.as_ref() else {
                    return Vec::new();
                };
                let n = n.token().to_string();
                let one = matches!(
                    (binop, n.as_str()),
                    (BinOp::TwoEqual(_) | BinOp::GreaterThanEqual(_), "1")
                        | (BinOp::TildeEqual(_) | BinOp::GreaterThan(_), "0")
                );
                let zero = matches!(
                    (binop, n.as_str()),
                    (BinOp::TwoEqual(_) | BinOp::LessThanEqual(_), "0")
                        | (BinOp::TildeEqual(_) | BinOp::LessThan(_), "1")
                );
                if !((one && truthy) || (zero && !truthy)) {
                    return Vec::new();
                }
                let Some(args) = self.command_call(call) else {
                    return Vec::new();
                };
                let name = args.first().and_then(|a| literal_string(a));
                match (
                    name.map(str::to_ascii_uppercase).as_deref(),
                    args.as_slice(),
                ) {
                    (Some("EXISTS"), [_, key]) => vec![(self.text_of(key), None)],
                    (Some("HEXISTS"), [_, key, field]) => {
                        vec![(self.text_of(key), Some(self.text_of(field)))]
                    }
                    _ => Vec::new(),
                }
            }
            _ => Vec::new(),
        }
    }
}
