//! The CEL rules of a CRD (`x-kubernetes-validations`), evaluated with the
//! `cel` crate (cel-rust) in the environment the API server gives them: the
//! standard library with the strings extension (`split`, `lowerAscii`, …)
//! that Kubernetes adds; `self` the value the rule sits on and `oldSelf`
//! its stored value. JSON integers are CEL `int`s, as Kubernetes types
//! `type: integer`. Each rule is compiled once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use cel::objects::Key;
use cel::{Context, Env, Program, Value as Cel};
use serde_json::Value;

fn env() -> &'static Arc<Env> {
    static ENV: OnceLock<Arc<Env>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = Env::stdlib();
        env.add_extension(cel::extensions::strings)
            .expect("the strings extension");
        Arc::new(env)
    })
}

fn program(rule: &str) -> Result<Arc<Program>, String> {
    static CACHE: OnceLock<Mutex<HashMap<String, Arc<Program>>>> = OnceLock::new();
    let mut cache = CACHE.get_or_init(Default::default).lock().unwrap();
    if let Some(p) = cache.get(rule) {
        return Ok(p.clone());
    }
    let p = Arc::new(env().compile(rule).map_err(|e| e.to_string())?);
    cache.insert(rule.to_string(), p.clone());
    Ok(p)
}

/// Whether `rule` compiles (the error when not).
pub fn compile(rule: &str) -> Result<(), String> {
    program(rule).map(drop)
}

fn run(rule: &str, this: &Value, schema: &Value, old: Option<&Value>) -> Result<Cel, String> {
    let program = program(rule)?;
    let mut ctx = Context::with_env(env().clone());
    ctx.add_variable_from_value("self", cel_of(this, schema));
    if let Some(old) = old {
        ctx.add_variable_from_value("oldSelf", cel_of(old, schema));
    }
    program.execute(&ctx).map_err(|e| e.to_string())
}

/// Whether `rule` holds of `this`; an evaluation error (a missing field
/// read without `has()`, a type mismatch) is an error, as it is to the API
/// server.
pub fn holds(
    rule: &str,
    this: &Value,
    schema: &Value,
    old: Option<&Value>,
) -> Result<bool, String> {
    match run(rule, this, schema, old)? {
        Cel::Bool(b) => Ok(b),
        other => Err(format!("the rule gave {other:?}, not a bool")),
    }
}

/// A `messageExpression`'s string.
pub fn message(
    expr: &str,
    this: &Value,
    schema: &Value,
    old: Option<&Value>,
) -> Result<String, String> {
    match run(expr, this, schema, old)? {
        Cel::String(s) => Ok(s.to_string()),
        other => Err(format!("the message expression gave {other:?}")),
    }
}

/// A value as CEL sees it under its schema `s`: a declared property by its
/// escaped name (`namespace` is `__namespace__`), a map's keys as they are.
fn cel_of(v: &Value, s: &Value) -> Cel {
    match v {
        Value::Null => Cel::Null,
        Value::Bool(b) => Cel::Bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Cel::Int(i),
            None => Cel::Float(n.as_f64().unwrap_or(0.0)),
        },
        Value::String(s) => Cel::String(Arc::new(s.clone())),
        Value::Array(items) => Cel::List(Arc::new(
            items.iter().map(|i| cel_of(i, &s["items"])).collect(),
        )),
        Value::Object(map) => {
            let props = s["properties"].as_object();
            let entries: HashMap<Key, Cel> = map
                .iter()
                .map(|(k, v)| match props.and_then(|p| p.get(k)) {
                    Some(ps) => (Key::String(Arc::new(escaped(k))), cel_of(v, ps)),
                    None => (
                        Key::String(Arc::new(k.clone())),
                        cel_of(v, &s["additionalProperties"]),
                    ),
                })
                .collect();
            Cel::from(entries)
        }
    }
}

/// CEL's reserved words, which a property name is escaped from
/// (k8s.io/apiserver/pkg/cel/escaping.go).
const RESERVED: &[&str] = &[
    "true",
    "false",
    "null",
    "in",
    "as",
    "break",
    "const",
    "continue",
    "else",
    "for",
    "function",
    "if",
    "import",
    "let",
    "loop",
    "package",
    "namespace",
    "return",
    "var",
    "void",
    "while",
];

/// A property name as a CEL expression reads it.
fn escaped(name: &str) -> String {
    if RESERVED.contains(&name) {
        return format!("__{name}__");
    }
    name.replace("__", "__underscores__")
        .replace('.', "__dot__")
        .replace('-', "__dash__")
        .replace('/', "__slash__")
}
