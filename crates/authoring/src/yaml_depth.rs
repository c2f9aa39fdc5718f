//! A linear pre-scan of a YAML text's nesting depth. The YAML parser's cost grows with the
//! square of the nesting depth before its recursion limit refuses a document (seconds at 10,000
//! levels, minutes at 100,000), so the CLI refuses deeply nested input before parsing it.
//!
//! The scan over-approximates: it counts open flow collections (`[`, `{`) outside quotes and
//! comments, plus the stack of increasing block indentations and the `- ` sequence indicators
//! that open a line, and skips the content of block scalars (`|`, `>`). The limit is twice the
//! parser's own (128), so no document the parser accepts is refused.

/// Deepest nesting the pre-scan lets through.
pub const MAX_YAML_DEPTH: usize = 256;

/// Quoting state carried across lines (quoted scalars may span lines).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Quote {
    None,
    Single,
    Double,
}

/// The deepest nesting found in `text`, stopping early once it passes `limit`.
pub fn nesting_depth(text: &str, limit: usize) -> usize {
    let mut deepest = 0usize;
    let mut flow = 0usize;
    let mut quote = Quote::None;
    let mut indents: Vec<usize> = Vec::new();
    // Indentation of the line that opened a block scalar: deeper lines are its content.
    let mut block_scalar: Option<usize> = None;
    for line in text.lines() {
        let indent = line.len() - line.trim_start_matches(' ').len();
        let body = &line[indent..];
        if let Some(owner) = block_scalar {
            if body.is_empty() || indent > owner {
                continue;
            }
            block_scalar = None;
        }
        if flow == 0 && quote == Quote::None {
            if body.is_empty() || body.starts_with('#') {
                continue;
            }
            if body.starts_with("---") || body.starts_with("...") {
                indents.clear();
                continue;
            }
            while indents.last().is_some_and(|&top| top >= indent) {
                indents.pop();
            }
            indents.push(indent);
            let dashes = body
                .split_inclusive(' ')
                .take_while(|t| t.trim_end() == "-")
                .count();
            deepest = deepest.max(indents.len() + dashes);
        }
        let mut previous = ' ';
        let mut chars = body.chars().peekable();
        while let Some(c) = chars.next() {
            match quote {
                Quote::Single if c == '\'' => {
                    if chars.peek() == Some(&'\'') {
                        chars.next();
                    } else {
                        quote = Quote::None;
                    }
                }
                Quote::Double if c == '\\' => {
                    chars.next();
                }
                Quote::Double if c == '"' => quote = Quote::None,
                Quote::Single | Quote::Double => {}
                Quote::None => match c {
                    '#' if previous == ' ' || previous == '\t' => break,
                    '\'' => quote = Quote::Single,
                    '"' => quote = Quote::Double,
                    '[' | '{' => {
                        flow += 1;
                        deepest = deepest.max(indents.len() + flow);
                    }
                    ']' | '}' => flow = flow.saturating_sub(1),
                    _ => {}
                },
            }
            previous = c;
        }
        let opens_block_scalar = quote == Quote::None
            && flow == 0
            && body
                .split_whitespace()
                .take_while(|t| !t.starts_with('#'))
                .last()
                .is_some_and(|t| {
                    t.starts_with(['|', '>'])
                        && t[1..].chars().all(|c| matches!(c, '-' | '+' | '1'..='9'))
                });
        if opens_block_scalar {
            block_scalar = Some(indent);
        }
        if deepest > limit {
            return deepest;
        }
    }
    deepest
}

/// Refuses a text nested deeper than [`MAX_YAML_DEPTH`], before any parsing.
pub fn check_depth(text: &str) -> Result<(), String> {
    let depth = nesting_depth(text, MAX_YAML_DEPTH);
    if depth > MAX_YAML_DEPTH {
        return Err(format!(
            "nested deeper than {MAX_YAML_DEPTH} levels (YAML or JSON); refused before parsing"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_documents_are_shallow() {
        let text = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  labels: {a: b}\ndata:\n  k: v\n";
        assert_eq!(nesting_depth(text, 1000), 3);
        let list = "items:\n- name: a\n  value: [1, [2, 3]]\n- - x\n  - y\n";
        assert_eq!(nesting_depth(list, 1000), 4);
    }

    #[test]
    fn quotes_comments_and_block_scalars_do_not_count() {
        let text = "a: '[[[{{{'\nb: \"[[[\\\"[[\"\nc: x # [[[[[\nd: |\n  [[[[[[\n    {{{{{\n      ]]\ne: 1\n";
        assert_eq!(nesting_depth(text, 1000), 1);
    }

    #[test]
    fn deep_flow_and_block_nesting_is_refused_quickly() {
        let flow = "[".repeat(100_000);
        let err = check_depth(&flow).expect_err("deep flow");
        assert!(err.contains("deeper than 256"), "{err}");
        let block: String = (0..10_000)
            .map(|i| format!("{}k{i}:\n", " ".repeat(i)))
            .collect();
        assert!(check_depth(&block).is_err(), "deep block mappings");
        let dashes = format!("{}x\n", "- ".repeat(10_000));
        assert!(check_depth(&dashes).is_err(), "deep sequences on one line");
    }

    #[test]
    fn what_the_parser_accepts_passes() {
        // 120 levels of each kind: within the parser's own limit.
        let flow = format!("{}{}", "[".repeat(120), "]".repeat(120));
        assert!(check_depth(&flow).is_ok());
        let block: String = (0..120)
            .map(|i| format!("{}k{i}:\n", " ".repeat(i)))
            .collect();
        assert!(check_depth(&block).is_ok());
        let json =
            serde_json::to_string(&serde_json::json!({"a": [{"b": {"c": [1, 2]}}]})).expect("json");
        assert_eq!(
            nesting_depth(&json, 1000),
            6,
            "the line, then five brackets"
        );
    }
}
