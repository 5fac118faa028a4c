//! Flyte 1's `SlurmShellTask` script: a Python format string, read as flytekit's
//! `_PythonFStringInterpolizer` reads it (`str.format` with `inputs` and `outputs` namespaces),
//! whose `{inputs.x}` and `{outputs.y}` are filled in before the job is submitted, as the
//! plugin's SSH agent filled them in on its side; `{{` and `}}` are literal braces (a shell's
//! `${HOME}` is written `${{HOME}}`, as flytekit requires).
//!
//! Where this differs from the agent, on purpose:
//! - every value placed in the script is one shell word, quoted (the agent pasted it raw, so a
//!   string input with a space or a `;` split the command or ran another);
//! - a File or Dir input is its URI (the agent downloaded it to its own disk, a path that does not
//!   exist on the cluster);
//! - `{ctx...}` (flytekit's execution context, which does not exist on the cluster), conversions
//!   (`{inputs.x!r}`), format specs (`{inputs.x:>5}`) and indexing are refused by name.
//!
//! Hand-written: the grammar is the small subset of Python's format mini-language the plugin's
//! scripts use, and the crates that implement format strings implement Rust's, whose escapes and
//! placeholders differ.

use super::env::python_float;
use super::error::RenderError;
use super::shell::quote;
use super::spec::{InputValue, ShellTemplate};

/// A shell task's script and its output locations, filled in.
#[derive(Debug, Clone, PartialEq)]
pub struct Filled {
    pub script: String,
    /// `(output, path on the cluster)`, in the task's order.
    pub outputs: Vec<(String, String)>,
}

/// Fills in `template`'s output locations (from the inputs), then its script (from the inputs and
/// those locations), every value in the script shell-quoted.
pub fn fill(
    script: &str,
    template: &ShellTemplate,
    inputs: &[(String, InputValue)],
) -> Result<Filled, RenderError> {
    let input = |name: &str, field: &str| -> Result<String, RenderError> {
        let (_, v) = inputs.iter().find(|(n, _)| n == name).ok_or_else(|| {
            let known: Vec<&str> = inputs.iter().map(|(n, _)| n.as_str()).collect();
            RenderError::config(
                field,
                format!(
                    "`{{inputs.{name}}}`: the task has no input `{name}` (its inputs: {})",
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                ),
            )
        })?;
        python_str(name, v, field)
    };

    let mut outputs = Vec::new();
    for (name, location) in &template.output_locations {
        let field = format!("output_locs.{name}");
        let path = substitute(location, &field, |ns, key| match ns {
            Namespace::Inputs => input(key, &field),
            Namespace::Outputs => Err(RenderError::config(
                &field,
                format!(
                    "`{{outputs.{key}}}`: an output location is made from the inputs only, not \
                     from other outputs"
                ),
            )),
        })?;
        check_location(&path, &field)?;
        outputs.push((name.clone(), path));
    }

    let script = substitute(script, "script", |ns, key| match ns {
        Namespace::Inputs => quote(&input(key, "script")?),
        Namespace::Outputs => {
            let (_, path) = outputs.iter().find(|(n, _)| n == key).ok_or_else(|| {
                let known: Vec<&str> = outputs.iter().map(|(n, _)| n.as_str()).collect();
                RenderError::config(
                    "script",
                    format!(
                        "`{{outputs.{key}}}`: the task has no output location `{key}` (its \
                         output_locs: {})",
                        if known.is_empty() {
                            "none".to_string()
                        } else {
                            known.join(", ")
                        }
                    ),
                )
            })?;
            quote(path)
        }
    })?;
    Ok(Filled { script, outputs })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Namespace {
    Inputs,
    Outputs,
}

/// `tmpl` with each `{inputs.x}` / `{outputs.y}` replaced by `value(namespace, name)`.
fn substitute(
    tmpl: &str,
    field: &str,
    mut value: impl FnMut(Namespace, &str) -> Result<String, RenderError>,
) -> Result<String, RenderError> {
    let line_of = |at: usize| tmpl[..at].matches('\n').count() + 1;
    let mut out = String::with_capacity(tmpl.len());
    let mut rest = tmpl.char_indices().peekable();
    while let Some((at, c)) = rest.next() {
        match c {
            '{' if rest.peek().map(|(_, c)| *c) == Some('{') => {
                rest.next();
                out.push('{');
            }
            '}' if rest.peek().map(|(_, c)| *c) == Some('}') => {
                rest.next();
                out.push('}');
            }
            '}' => {
                return Err(RenderError::config(
                    field,
                    format!(
                        "line {}: a single `}}` (Python's format syntax, which flytekit's shell \
                         tasks use: write `}}}}` for a literal brace)",
                        line_of(at)
                    ),
                ));
            }
            '{' => {
                let start = at + 1;
                let Some(len) = tmpl[start..].find('}') else {
                    return Err(RenderError::config(
                        field,
                        format!(
                            "line {}: a `{{` that is never closed (write `{{{{` for a literal brace)",
                            line_of(at)
                        ),
                    ));
                };
                let name = &tmpl[start..start + len];
                while rest.peek().is_some_and(|(i, _)| *i <= start + len) {
                    rest.next();
                }
                let (ns, key) = placeholder(name).map_err(|problem| {
                    RenderError::config(
                        field,
                        format!("line {}: `{{{name}}}`: {problem}", line_of(at)),
                    )
                })?;
                out.push_str(&value(ns, key)?);
            }
            c => out.push(c),
        }
    }
    Ok(out)
}

/// The namespace and name of a placeholder's text (between the braces).
fn placeholder(text: &str) -> Result<(Namespace, &str), String> {
    if text.contains(['!', ':', '[', '{']) {
        return Err(
            "conversions (`!r`), format specs (`:>5`) and indexing are not supported; use \
             `{inputs.NAME}` or `{outputs.NAME}` alone"
                .into(),
        );
    }
    let identifier = |s: &str| {
        !s.is_empty()
            && !s.starts_with(|c: char| c.is_ascii_digit())
            && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    match text.trim().split_once('.') {
        Some(("inputs", key)) if identifier(key) => Ok((Namespace::Inputs, key)),
        Some(("outputs", key)) if identifier(key) => Ok((Namespace::Outputs, key)),
        Some(("ctx", _)) => Err(
            "flytekit's execution context is not available on the cluster; pass what the script \
             needs as an input"
                .into(),
        ),
        _ => Err(
            "not `{inputs.NAME}` or `{outputs.NAME}`; a shell's braces are doubled in a \
             SlurmShellTask script (`${{HOME}}` for `${HOME}`), as flytekit requires"
                .into(),
        ),
    }
}

/// An input as Python's `str()` of the value flytekit would have made of it, except a File or
/// Dir, which is its URI (module doc).
fn python_str(name: &str, v: &InputValue, field: &str) -> Result<String, RenderError> {
    Ok(match v {
        InputValue::Str(s) => s.clone(),
        InputValue::Int(i) => i.to_string(),
        InputValue::Float(f) => python_float(*f),
        InputValue::Bool(b) => if *b { "True" } else { "False" }.to_string(),
        InputValue::Blob { uri, .. } => uri.clone(),
        InputValue::Unsupported { type_name } => {
            return Err(RenderError::config(
                field,
                format!(
                    "`{{inputs.{name}}}` is a {type_name}; a shell task's script takes str, int, \
                     float, bool, File and Dir inputs"
                ),
            ));
        }
    })
}

/// An output location must be a plain absolute path: the connector reads the output there and
/// uploads it (staging confines it to the shared roots when it does).
fn check_location(path: &str, field: &str) -> Result<(), RenderError> {
    let bad = |problem: &str| {
        Err(RenderError::config(
            field,
            format!("`{}` {problem}", path.escape_default()),
        ))
    };
    if !path.starts_with('/') {
        return bad("must be an absolute path on the cluster's shared filesystem");
    }
    if path.chars().any(char::is_control) {
        return bad("must not contain control characters");
    }
    if path.split('/').any(|c| c == "..") {
        return bad("must not contain `..`");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs() -> Vec<(String, InputValue)> {
        vec![
            ("name".into(), InputValue::Str("run one; rm -rf /".into())),
            ("n".into(), InputValue::Int(3)),
            ("rate".into(), InputValue::Float(1e-05)),
            ("dry".into(), InputValue::Bool(false)),
            (
                "data".into(),
                InputValue::Blob {
                    uri: "s3://b/in/data.csv".into(),
                    multipart: false,
                },
            ),
        ]
    }

    fn template(locs: &[(&str, &str)]) -> ShellTemplate {
        ShellTemplate {
            output_locations: locs
                .iter()
                .map(|(n, l)| (n.to_string(), l.to_string()))
                .collect(),
        }
    }

    #[test]
    fn inputs_and_outputs_are_filled_in_as_single_shell_words() {
        let t = template(&[("report", "/shared/out/{inputs.n}/{inputs.name}.txt")]);
        let f = fill(
            "#!/bin/bash\n#SBATCH --time=5\necho {inputs.name} {inputs.n} {inputs.rate} {inputs.dry} {inputs.data}\n\
             cp x {outputs.report}\necho ${{HOME}} {{}}\n",
            &t,
            &inputs(),
        )
        .unwrap();
        assert_eq!(
            f.outputs,
            vec![(
                "report".into(),
                "/shared/out/3/run one; rm -rf /.txt".into()
            )]
        );
        assert_eq!(
            f.script,
            "#!/bin/bash\n#SBATCH --time=5\necho 'run one; rm -rf /' 3 1e-05 False s3://b/in/data.csv\n\
             cp x '/shared/out/3/run one; rm -rf /.txt'\necho ${HOME} {}\n"
        );
    }

    #[test]
    fn the_filled_script_runs_as_written_with_hostile_values() {
        // What bash makes of the filled words: each value one argument, nothing run.
        let hostile = "a b'c\"$(touch /tmp/pwned)`x`;\n$HOME";
        let ins = vec![("s".into(), InputValue::Str(hostile.into()))];
        let f = fill("printf '%s\\n' {inputs.s}", &ShellTemplate::default(), &ins).unwrap();
        let out = std::process::Command::new("bash")
            .args(["-c", &f.script])
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), format!("{hostile}\n"));
    }

    #[test]
    fn refusals_name_the_placeholder_and_the_fix() {
        let none = ShellTemplate::default();
        for (script, want) in [
            ("echo ${HOME}", "`{HOME}`: not `{inputs.NAME}`"),
            (
                "echo {inputs.missing}",
                "no input `missing` (its inputs: name, n",
            ),
            (
                "echo {outputs.nope}",
                "no output location `nope` (its output_locs: none)",
            ),
            ("echo {ctx.execution_id}", "execution context"),
            ("echo {inputs.n!r}", "conversions"),
            ("echo {inputs.n:>5}", "format specs"),
            ("echo {inputs.n", "line 1: a `{` that is never closed"),
            ("echo\necho }", "line 2: a single `}`"),
        ] {
            let e = fill(script, &none, &inputs()).unwrap_err().to_string();
            assert!(e.contains("`script`") && e.contains(want), "{script}: {e}");
        }
        let unsupported = vec![(
            "xs".into(),
            InputValue::Unsupported {
                type_name: "list".into(),
            },
        )];
        let e = fill("echo {inputs.xs}", &none, &unsupported)
            .unwrap_err()
            .to_string();
        assert!(e.contains("is a list"), "{e}");
        for (loc, want) in [
            ("out/{inputs.n}", "absolute path"),
            ("/shared/../etc/{inputs.n}", "`..`"),
            ("/shared/{outputs.x}", "inputs only"),
            ("/shared/{inputs.nope}", "no input `nope`"),
        ] {
            let e = fill("true", &template(&[("r", loc)]), &inputs())
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("output_locs.r") && e.contains(want),
                "{loc}: {e}"
            );
        }
    }
}
