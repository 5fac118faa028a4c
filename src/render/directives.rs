//! The leading `#SBATCH` block of a batch script, read with sbatch's own rules
//! (`src/sbatch/opt.c`: `_opt_batch_script`, `_get_argument`, then getopt_long):
//! - only lines starting with `#SBATCH` in column 0 are directives;
//! - blank lines and other comment lines (`#...`, including the shebang) do not end the block;
//!   the first other line (an executable line) does, and nothing after it is read;
//! - a directive line splits into words at whitespace; `'...'`/`"..."` group, `\` escapes the
//!   next character, an unquoted `#` starts a comment, an empty word ends the line;
//! - the words are then options as on the command line: `--opt=value`, `--opt value`, `-p value`,
//!   `-pvalue`, bundled flags (`-Hv`), unambiguous long-option prefixes, `--` ends options, and a
//!   word that is not an option is ignored (getopt permutes it away).

use super::error::{Origin, RenderError};
pub use super::options::RawOption;
use super::options::{Arg, Lookup, OptSpec, lookup_long, lookup_short};

/// What the leading directive block says.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Directives {
    pub options: Vec<RawOption>,
    /// Words that are not options (sbatch ignores them), with their line.
    pub ignored_words: Vec<(usize, String)>,
    /// 0-based index of the first executable line (= number of lines in the leading block).
    pub first_command_line: usize,
}

/// Splits a script into lines as sbatch does (on `\n` only).
fn lines(script: &str) -> impl Iterator<Item = &str> {
    script.split('\n')
}

/// True when sbatch would stop reading directives at this (non-directive) line.
fn is_command(line: &str) -> bool {
    match line.chars().find(|c| !c.is_ascii_whitespace()) {
        None => false,
        Some('#') => false,
        Some(_) => true,
    }
}

/// The words of one directive line (the text after `#SBATCH`), per `_get_argument`.
pub fn split_directive(text: &str, line_no: usize) -> Result<Vec<String>, RenderError> {
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    let mut words = Vec::new();
    loop {
        while i < chars.len() && chars[i].is_ascii_whitespace() {
            i += 1;
        }
        if i < chars.len() && chars[i] == ':' {
            return Err(RenderError::Directive {
                line: line_no,
                problem: "unexpected `:` (heterogeneous job separators are not supported)".into(),
            });
        }
        if i >= chars.len() {
            return Ok(words);
        }
        let mut word = String::new();
        let mut got_char = false;
        let mut quote: Option<char> = None;
        let mut escape = false;
        while i < chars.len() && (quote.is_some() || !chars[i].is_ascii_whitespace()) {
            let c = chars[i];
            if escape {
                escape = false;
            } else if c == '\\' {
                escape = true;
                i += 1;
                continue;
            } else if let Some(q) = quote {
                if c == q {
                    quote = None;
                    i += 1;
                    continue;
                }
            } else if c == '"' || c == '\'' {
                quote = Some(c);
                i += 1;
                continue;
            } else if c == '#' {
                // Unquoted, unescaped `#`: the rest of the line is a comment.
                if got_char {
                    words.push(word);
                }
                return Ok(words);
            }
            word.push(c);
            got_char = true;
            i += 1;
        }
        if let Some(q) = quote {
            return Err(RenderError::Directive {
                line: line_no,
                problem: format!("unmatched `{q}` in a #SBATCH line"),
            });
        }
        if !got_char {
            // sbatch's _get_argument returns NULL for a word made only of quotes, which ends the line.
            return Ok(words);
        }
        words.push(word);
    }
}

/// Reads the leading `#SBATCH` block of `script`.
pub fn parse_script(script: &str) -> Result<Directives, RenderError> {
    let mut out = Directives::default();
    let mut argv: Vec<(usize, String)> = Vec::new();
    let mut count = 0;
    for (idx, line) in lines(script).enumerate() {
        let line_no = idx + 1;
        if let Some(rest) = line.strip_prefix("#SBATCH") {
            if line.to_ascii_lowercase().contains("hetjob")
                || line.to_ascii_lowercase().contains("packjob")
            {
                return Err(RenderError::Directive {
                    line: line_no,
                    problem: "heterogeneous jobs (`#SBATCH hetjob`) cannot be submitted by the connector; \
                              split the work into separate tasks"
                        .into(),
                });
            }
            for w in split_directive(rest, line_no)? {
                argv.push((line_no, w));
            }
        } else if is_command(line) {
            break;
        }
        count = idx + 1;
    }
    out.first_command_line = count;
    let (options, ignored) = getopt(&argv, |line| Origin::Script { line })?;
    out.options = options;
    out.ignored_words = ignored;
    Ok(out)
}

fn unknown(origin: Origin, option: String, lookup: Lookup) -> RenderError {
    let hint = match lookup {
        Lookup::Ambiguous(c) => format!(" (ambiguous abbreviation of: {})", c.join(", ")),
        Lookup::Unknown if option.starts_with("--container") => {
            " (SPANK plugin options such as pyxis's are not available through slurmrestd; use the \
             task's `container` config)"
                .to_string()
        }
        Lookup::Unknown => " (see `sbatch --help`)".to_string(),
    };
    RenderError::UnknownOption {
        origin,
        option,
        hint,
    }
}

/// Words with the line they came from.
pub type Words = Vec<(usize, String)>;

/// getopt_long over directive words: the options, and the non-option words (ignored, as by
/// sbatch). `origin_of(line)` labels each option.
pub fn getopt(
    argv: &[(usize, String)],
    origin_of: impl Fn(usize) -> Origin,
) -> Result<(Vec<RawOption>, Words), RenderError> {
    let mut options = Vec::new();
    let mut ignored = Vec::new();
    let mut i = 0;
    while i < argv.len() {
        let (line, word) = (&argv[i].0, argv[i].1.as_str());
        let origin = origin_of(*line);
        i += 1;
        if word == "--" {
            ignored.extend(argv[i..].iter().cloned());
            break;
        }
        if let Some(body) = word.strip_prefix("--") {
            let (name, inline) = match body.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (body, None),
            };
            let spec =
                lookup_long(name).map_err(|l| unknown(origin.clone(), format!("--{name}"), l))?;
            let value = match (spec.arg, inline) {
                (Arg::None, Some(v)) => {
                    return Err(RenderError::InvalidValue {
                        origin,
                        option: spec.long.into(),
                        value: v,
                        expected: "this option takes no value".into(),
                    });
                }
                (Arg::None, None) => None,
                (Arg::Optional, v) => v,
                (Arg::Required, Some(v)) => Some(v),
                (Arg::Required, None) => {
                    if i < argv.len() {
                        i += 1;
                        Some(argv[i - 1].1.clone())
                    } else {
                        return Err(missing(origin, spec));
                    }
                }
            };
            options.push(RawOption {
                spec,
                value,
                origin,
            });
        } else if word.len() > 1 && word.starts_with('-') {
            let chars: Vec<char> = word[1..].chars().collect();
            let mut j = 0;
            while j < chars.len() {
                let c = chars[j];
                let spec = lookup_short(c)
                    .ok_or_else(|| unknown(origin.clone(), format!("-{c}"), Lookup::Unknown))?;
                j += 1;
                let rest: String = chars[j..].iter().collect();
                let value = match spec.arg {
                    Arg::None => None,
                    Arg::Optional => {
                        j = chars.len();
                        (!rest.is_empty()).then_some(rest)
                    }
                    Arg::Required => {
                        j = chars.len();
                        if !rest.is_empty() {
                            Some(rest)
                        } else if i < argv.len() {
                            i += 1;
                            Some(argv[i - 1].1.clone())
                        } else {
                            return Err(missing(origin.clone(), spec));
                        }
                    }
                };
                options.push(RawOption {
                    spec,
                    value,
                    origin: origin.clone(),
                });
            }
        } else {
            ignored.push((*line, word.to_string()));
        }
    }
    Ok((options, ignored))
}

fn missing(origin: Origin, spec: &OptSpec) -> RenderError {
    RenderError::InvalidValue {
        origin,
        option: spec.long.into(),
        value: String::new(),
        expected: "this option requires a value".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(script: &str) -> Vec<(&'static str, Option<String>, usize)> {
        parse_script(script)
            .unwrap()
            .options
            .into_iter()
            .map(|o| {
                let Origin::Script { line } = o.origin else {
                    panic!()
                };
                (o.spec.long, o.value, line)
            })
            .collect()
    }

    #[test]
    fn all_forms() {
        let s = "#!/bin/bash\n#SBATCH --time=10\n\n# a comment\n#SBATCH -p debug\n#SBATCH -N2 --ntasks 4\n\
                 #SBATCH --comment=\"two words\" # trailing\n#SBATCH -Hv\n#SBATCH --part=gpu\necho hi\n#SBATCH --mem=1G\n";
        assert_eq!(
            opts(s),
            vec![
                ("time", Some("10".into()), 2),
                ("partition", Some("debug".into()), 5),
                ("nodes", Some("2".into()), 6),
                ("ntasks", Some("4".into()), 6),
                ("comment", Some("two words".into()), 7),
                ("hold", None, 8),
                ("verbose", None, 8),
                ("partition", Some("gpu".into()), 9),
            ]
        );
        assert_eq!(parse_script(s).unwrap().first_command_line, 9);
    }

    #[test]
    fn indented_directive_is_a_comment_and_command_stops() {
        assert_eq!(
            opts("  #SBATCH --time=5\n#SBATCH -t 6\n"),
            vec![("time", Some("6".into()), 2)]
        );
        assert_eq!(opts("set -e\n#SBATCH -t 6\n"), vec![]);
    }

    #[test]
    fn escapes_and_quotes() {
        // As in sbatch, whitespace ends a word before `\` can escape it: `a\ b` is two words.
        assert_eq!(
            split_directive(r#" --comment=a\ b 'c d'"e" \#x #y"#, 1).unwrap(),
            vec!["--comment=a", "b", "c de", "#x"]
        );
        assert_eq!(
            split_directive(r#" --comment=a\"b"#, 1).unwrap(),
            vec!["--comment=a\"b"]
        );
        assert!(split_directive(" --comment='oops", 3).is_err());
        assert_eq!(
            split_directive(" --comment \"\" -t 5", 1).unwrap(),
            vec!["--comment"]
        );
    }

    #[test]
    fn errors() {
        assert!(matches!(
            parse_script("#SBATCH --nosuch=1\n"),
            Err(RenderError::UnknownOption { .. })
        ));
        assert!(matches!(
            parse_script("#SBATCH --time\n"),
            Err(RenderError::InvalidValue { .. })
        ));
        assert!(matches!(
            parse_script("#SBATCH --hold=yes\n"),
            Err(RenderError::InvalidValue { .. })
        ));
        assert!(matches!(
            parse_script("#SBATCH hetjob\n"),
            Err(RenderError::Directive { line: 1, .. })
        ));
        assert!(matches!(
            parse_script("#SBATCH --m=1\n"),
            Err(RenderError::UnknownOption { .. })
        ));
    }

    #[test]
    fn non_options_and_double_dash_are_ignored() {
        let d = parse_script("#SBATCH foo -t 5 -- --mem=1\n").unwrap();
        assert_eq!(d.options.len(), 1);
        assert_eq!(d.ignored_words.len(), 2);
    }
}
