//! Compares our evaluator with cel-go's answers (benches/cel-conformance.sh): reads JSON lines
//! `{"source", "expr", "out"?, "err"?}` as `celgo -eval` prints them on standard input and
//! prints, for each, ours next to cel-go's with whether they agree; the last line is a summary.
//! Agreement: both give the same canonical value, or both give an error.

use std::io::BufRead;

use conditions::{Bindings, Evaluator};
use serde_json::{Value, json};

fn main() -> std::io::Result<()> {
    let empty = json!({});
    let bindings = Bindings::TopLevel(&empty);
    let (mut compiled, mut compiled_agree, mut rejected, mut rejected_agree) = (0, 0, 0, 0);
    for line in std::io::stdin().lock().lines() {
        let line = line?;
        let Ok(case) = serde_json::from_str::<Value>(&line) else {
            eprintln!("not a case: {line}");
            continue;
        };
        let expr = case["expr"].as_str().unwrap_or_default();
        let theirs_err = case["err"].as_str().unwrap_or_default();
        let ours = Evaluator::shared().eval_expression_typed(expr, &bindings);
        let agree = match (&ours, case["out"].as_str()) {
            (Ok(v), Some(out)) => v.canonical == out,
            (Err(_), None) => true,
            _ => false,
        };
        if theirs_err.starts_with("compile:") {
            rejected += 1;
            rejected_agree += usize::from(agree);
        } else {
            compiled += 1;
            compiled_agree += usize::from(agree);
        }
        let ours = match ours {
            Ok(v) => json!({"out": v.canonical}),
            Err(e) => json!({"err": e.to_string()}),
        };
        println!(
            "{}",
            json!({"agree": agree, "source": case["source"], "expr": expr,
                   "celgo": {"out": case["out"], "err": case["err"]}, "ours": ours})
        );
    }
    println!(
        "{}",
        json!({"summary": {"compiled_by_celgo": compiled, "agree": compiled_agree,
                           "rejected_by_celgo": rejected, "rejected_too": rejected_agree}})
    );
    Ok(())
}
