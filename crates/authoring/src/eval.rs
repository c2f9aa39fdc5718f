//! `work-agent eval`: try an expression, or a work's condition rules, against an object offline.
//!
//! Exit codes: 0 when the expression evaluated (whatever its value) or the work's conditions were
//! computed; 1 when evaluation failed; 2 on a compile error or bad input.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use conditions::{Bindings, EvalError, Evaluator, TypedValue};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use serde_json::{Value, json};
use work_api::{ManifestCondition, ManifestWork};

use work_semantics::manifests::resource_meta;

use crate::locate::locate;

/// Arguments of `work-agent eval`.
#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("what").required(true).args(["expression", "work"])))]
pub struct EvalArgs {
    /// CEL expression to evaluate (it may start with `-`, as `-1 < 0`).
    #[arg(long, short = 'e', value_name = "EXPR", allow_hyphen_values = true)]
    pub expression: Option<String>,
    /// A ManifestWork file: print the manifest conditions its rules give for the object.
    #[arg(long, value_name = "WORK.yaml", conflicts_with = "bind")]
    pub work: Option<PathBuf>,
    /// The object (YAML or JSON; `-` reads standard input). Required with `--work` and
    /// `--explain`; without it an expression sees no variables (`-e '-1 < 0'`).
    #[arg(long, value_name = "FILE")]
    pub object: Option<PathBuf>,
    /// How the object is bound: as `object`, or each top-level field as a variable.
    #[arg(long, value_enum)]
    pub bind: Option<Bind>,
    /// Output format: text (expression default), yaml (work default) or json.
    #[arg(long, value_enum)]
    pub output: Option<Output>,
    /// Show how each rule reached its condition: every expression's value, where the AND
    /// stopped, the stale-status guard, where the message came from (text or json).
    #[arg(long)]
    pub explain: bool,
    /// With `--explain --expression`: the condition type the expression is explained as setting.
    #[arg(long, value_name = "TYPE", default_value = crate::explain::EXPRESSION_CONDITION, requires = "explain")]
    pub condition: String,
}

/// How the object is bound for `--expression`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Bind {
    /// The object is the variable `object` (as in condition rules).
    #[default]
    Object,
    /// Each top-level field is a variable (`status`, `metadata`, ...), as Flux healthCheckExprs.
    Toplevel,
}

/// Output format.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    /// Human-readable.
    Text,
    /// YAML.
    Yaml,
    /// One line of JSON.
    Json,
}

/// Bad input: the files could not be read or are not what they should be.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The path.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
    /// The file is not YAML or JSON, or holds something else than one object.
    #[error("{path}: {message}")]
    Parse {
        /// The path.
        path: String,
        /// What is wrong.
        message: String,
    },
}

/// Reads a file (or standard input for `-`) holding exactly one YAML or JSON object.
pub fn read_object(path: &Path) -> Result<Value, InputError> {
    let shown = path.display().to_string();
    let text = if path == Path::new("-") {
        std::io::read_to_string(std::io::stdin())
    } else {
        std::fs::read_to_string(path)
    }
    .map_err(|source| InputError::Read {
        path: shown.clone(),
        source,
    })?;
    let parse = |message: String| InputError::Parse {
        path: shown.clone(),
        message,
    };
    let mut docs = parse_documents(&text).map_err(parse)?;
    match docs.len() {
        1 => {}
        0 => return Err(parse("no document".into())),
        n => return Err(parse(format!("{n} documents; expected one"))),
    }
    let doc = docs.remove(0);
    if !doc.is_object() {
        return Err(parse("not an object (a mapping at the top level)".into()));
    }
    Ok(doc)
}

/// All non-empty documents of a YAML (or JSON) text.
pub fn parse_documents(text: &str) -> Result<Vec<Value>, String> {
    use serde::Deserialize;
    crate::yaml_depth::check_depth(text)?;
    let mut docs = Vec::new();
    for doc in serde_norway::Deserializer::from_str(text) {
        let value = Value::deserialize(doc).map_err(|e| format!("not valid YAML or JSON: {e}"))?;
        if !value.is_null() {
            docs.push(value);
        }
    }
    Ok(docs)
}

/// The outcome of evaluating one expression, as printed.
#[derive(Debug, PartialEq)]
pub enum ExprOutcome {
    /// Evaluated to this value.
    Value(Value),
    /// Evaluated to a value without a JSON form (an IP, a CIDR, a semver, NaN, ...): its
    /// string form and CEL type.
    Typed {
        /// The string form (`1.2.3.4`), or the canonical rendering of a list or map of such.
        text: String,
        /// CEL's name for its type (`net.IP`).
        type_name: String,
    },
    /// Could not be evaluated.
    Failed(EvalError),
    /// The input could not be read.
    BadInput(InputError),
}

impl ExprOutcome {
    /// Exit code: 0 evaluated, 1 evaluation failed, 2 compile error or bad input.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Value(_) | Self::Typed { .. } => 0,
            Self::Failed(e) if e.is_compile_error() => 2,
            Self::Failed(_) => 1,
            Self::BadInput(_) => 2,
        }
    }

    /// The `{"value": .., "error": ..}` object of `--output json`.
    pub fn to_json(&self) -> Value {
        match self {
            Self::Value(v) => json!({"value": v, "error": null}),
            Self::Typed { text, type_name } => {
                json!({"value": text, "type": type_name, "error": null})
            }
            Self::Failed(e) => json!({"value": null, "error": e.to_string()}),
            Self::BadInput(e) => json!({"value": null, "error": e.to_string()}),
        }
    }

    /// The one line `--output json` prints, keys in the documented order.
    pub fn json_line(&self) -> String {
        match self {
            Self::Typed { text, type_name } => format!(
                r#"{{"value": {}, "type": {}, "error": null}}"#,
                json!(text),
                json!(type_name)
            ),
            _ => {
                let doc = self.to_json();
                json_line(&doc["value"], &doc["error"])
            }
        }
    }
}

impl PartialEq for InputError {
    fn eq(&self, other: &Self) -> bool {
        self.to_string() == other.to_string()
    }
}

/// Evaluates one expression against the object in `object_path` (no object: no variables).
pub fn eval_expression(expression: &str, object_path: Option<&Path>, bind: Bind) -> ExprOutcome {
    let object = match object_path.map(read_object) {
        Some(Ok(o)) => Some(o),
        Some(Err(e)) => return ExprOutcome::BadInput(e),
        None => None,
    };
    let no_variables = Value::Object(serde_json::Map::new());
    let bindings = match (&object, bind) {
        (None, _) => Bindings::TopLevel(&no_variables),
        (Some(object), Bind::Object) => Bindings::Object(object),
        (Some(object), Bind::Toplevel) => Bindings::TopLevel(object),
    };
    match Evaluator::shared().eval_expression_typed(expression, &bindings) {
        Ok(TypedValue { json: Some(v), .. }) => ExprOutcome::Value(v),
        Ok(TypedValue {
            json: None,
            text,
            type_name,
            ..
        }) => ExprOutcome::Typed { text, type_name },
        Err(e) => ExprOutcome::Failed(e),
    }
}

/// What `eval --work` computed for one object.
#[derive(Debug)]
pub struct WorkEval {
    /// The manifest's status entry, as the agent would write it (rule-made conditions only).
    pub status: ManifestCondition,
    /// Notes for the author (no matching config, object not in the work, ...).
    pub notes: Vec<String>,
}

/// Computes the rule-made manifest conditions the agent would write for `object` under `work`.
pub fn eval_work(work: &ManifestWork, object: &Value, now: Time) -> Result<WorkEval, String> {
    let located = locate(work, object)?;
    let updates = Evaluator::shared().evaluate_manifest(&located.rules, object);
    let conditions: Vec<Condition> =
        conditions::merge_conditions(&[], &updates, work.metadata.generation, now);
    Ok(WorkEval {
        status: ManifestCondition {
            resource_meta: resource_meta(located.ordinal, &located.id, &located.resource),
            status_feedback: None,
            conditions,
        },
        notes: located.notes,
    })
}

/// `{"value": <value>, "error": <error>}` with `value` first (serde_json would sort the keys).
fn json_line(value: &Value, error: &Value) -> String {
    format!(r#"{{"value": {value}, "error": {error}}}"#)
}

fn read_work(path: &Path) -> Result<ManifestWork, InputError> {
    let value = read_object(path)?;
    serde_json::from_value(value).map_err(|e| InputError::Parse {
        path: path.display().to_string(),
        message: format!("not a ManifestWork: {e}"),
    })
}

fn now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

/// Runs the subcommand.
pub fn main(args: EvalArgs) -> ExitCode {
    if args.explain {
        return main_explain(&args);
    }
    match (&args.expression, &args.work) {
        (Some(expression), _) => main_expression(expression, &args),
        (None, Some(work)) => main_work(work, &args),
        (None, None) => {
            eprintln!("work-agent eval: give --expression or --work");
            ExitCode::from(2)
        }
    }
}

fn main_expression(expression: &str, args: &EvalArgs) -> ExitCode {
    let outcome = eval_expression(
        expression,
        args.object.as_deref(),
        args.bind.unwrap_or_default(),
    );
    match args.output.unwrap_or(Output::Text) {
        Output::Json => println!("{}", outcome.json_line()),
        Output::Yaml => {
            let doc = match &outcome {
                ExprOutcome::Value(v) => v.clone(),
                other => other.to_json(),
            };
            print!(
                "{}",
                serde_norway::to_string(&doc).unwrap_or_else(|_| doc.to_string())
            );
        }
        Output::Text => match &outcome {
            ExprOutcome::Value(v) => println!("{v}"),
            ExprOutcome::Typed { text, type_name } => println!("{text} ({type_name})"),
            ExprOutcome::Failed(e) => eprintln!("error: {e}"),
            ExprOutcome::BadInput(e) => eprintln!("error: {e}"),
        },
    }
    ExitCode::from(outcome.exit_code())
}

fn main_work(work_path: &Path, args: &EvalArgs) -> ExitCode {
    let Some(object_path) = args.object.as_deref() else {
        return input_failure(
            "--work needs --object (the live object to evaluate)",
            args.output,
        );
    };
    let loaded = read_work(work_path).and_then(|w| Ok((w, read_object(object_path)?)));
    let (work, object) = match loaded {
        Ok(x) => x,
        Err(e) => return input_failure(&e.to_string(), args.output),
    };
    let result = match eval_work(&work, &object, now()) {
        Ok(r) => r,
        Err(e) => return input_failure(&e, args.output),
    };
    for note in &result.notes {
        eprintln!("note: {note}");
    }
    let printed = match args.output.unwrap_or(Output::Yaml) {
        Output::Json => serde_json::to_string(&result.status)
            .map(|s| format!("{s}\n"))
            .map_err(|e| e.to_string()),
        Output::Yaml | Output::Text => {
            serde_norway::to_string(&result.status).map_err(|e| e.to_string())
        }
    };
    match printed {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => input_failure(&format!("printing the result: {e}"), args.output),
    }
}

fn main_explain(args: &EvalArgs) -> ExitCode {
    use crate::explain::{
        explain_expression, explain_work, rule_json, rule_text, work_json, work_text,
    };
    if args.bind == Some(Bind::Toplevel) {
        return input_failure(
            "--explain explains condition rules, which bind the object as `object`; drop --bind toplevel",
            args.output,
        );
    }
    let Some(object_path) = args.object.as_deref() else {
        // A work without an object: the order its manifests are applied in, and why.
        if let (None, Some(work_path)) = (&args.expression, &args.work) {
            return match read_work(work_path) {
                Ok(work) => {
                    print!("{}", crate::order::order_text(&work));
                    ExitCode::SUCCESS
                }
                Err(e) => input_failure(&e.to_string(), args.output),
            };
        }
        return input_failure(
            "--explain needs --object (the live object to evaluate)",
            args.output,
        );
    };
    let object = match read_object(object_path) {
        Ok(o) => o,
        Err(e) => return input_failure(&e.to_string(), args.output),
    };
    let json = args.output == Some(Output::Json);
    let printed = match (&args.expression, &args.work) {
        (Some(expression), _) => {
            let rule = explain_expression(expression, &args.condition, &object);
            if json {
                format!("{}\n", rule_json(0, &rule))
            } else {
                rule_text("expression", &rule)
            }
        }
        (None, Some(work_path)) => {
            let explained = read_work(work_path)
                .map_err(|e| e.to_string())
                .and_then(|work| explain_work(&work, &object));
            match explained {
                Ok(e) if json => format!("{}\n", work_json(&e)),
                Ok(e) => work_text(&e),
                Err(e) => return input_failure(&e, args.output),
            }
        }
        (None, None) => return input_failure("give --expression or --work", args.output),
    };
    print!("{printed}");
    ExitCode::SUCCESS
}

fn input_failure(message: &str, output: Option<Output>) -> ExitCode {
    if output == Some(Output::Json) {
        println!("{}", json_line(&Value::Null, &json!(message)));
    } else {
        eprintln!("error: {message}");
    }
    ExitCode::from(2)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::locate::guess_plural;

    #[test]
    fn plurals() {
        for (kind, plural) in [
            ("Job", "jobs"),
            ("Pod", "pods"),
            ("Deployment", "deployments"),
            ("Ingress", "ingresses"),
            ("NetworkPolicy", "networkpolicies"),
            ("Gateway", "gateways"),
            ("Endpoints", "endpoints"),
            ("ComponentStatus", "componentstatuses"),
            ("Box", "boxes"),
            ("Patch", "patches"),
            ("Mesh", "meshes"),
            ("MyCustomResource", "mycustomresources"),
            ("PodMetrics", "pods"),
        ] {
            assert_eq!(guess_plural(kind), plural, "{kind}");
        }
    }

    #[test]
    fn documents_are_split_and_empty_ones_skipped() {
        let docs = parse_documents("a: 1\n---\n---\nb: 2\n").unwrap();
        assert_eq!(docs, vec![json!({"a": 1}), json!({"b": 2})]);
        assert!(parse_documents("a: [").is_err());
        assert_eq!(
            parse_documents("{\"x\": true}").unwrap(),
            vec![json!({"x": true})]
        );
    }

    #[test]
    fn deeply_nested_input_is_refused_before_parsing() {
        let deep = format!("a: {}", "[".repeat(50_000));
        let err = parse_documents(&deep).expect_err("too deep");
        assert!(err.contains("nested deeper than 256 levels"), "{err}");
    }

    #[test]
    fn exit_codes_follow_the_error_kind() {
        assert_eq!(ExprOutcome::Value(json!(false)).exit_code(), 0);
        let compile = EvalError::Compile {
            message: "x".into(),
        };
        assert_eq!(ExprOutcome::Failed(compile).exit_code(), 2);
        let runtime = EvalError::Runtime {
            message: "no such key".into(),
        };
        let outcome = ExprOutcome::Failed(runtime);
        assert_eq!(outcome.exit_code(), 1);
        assert_eq!(outcome.to_json()["value"], Value::Null);
        assert_eq!(outcome.to_json()["error"], "evaluation error: no such key");
    }
}
