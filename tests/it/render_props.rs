//! Property tests: the `#SBATCH` parser, time and size parsing, and shell quoting (no value can
//! inject a line or an option — checked by running the rendered text through a real bash).

use crate::render_support;

use std::io::Write;
use std::process::{Command, Stdio};

use proptest::prelude::*;
use render_support::*;
use serde_json::json;
use slurm_connector::render::directives::{parse_script, split_directive};
use slurm_connector::render::shell::quote;
use slurm_connector::render::units::{parse_mbytes, parse_time_limit};
use slurm_connector::render::{Origin, RenderError, render_at};
use slurm_connector::slurmrestd::job_description::Limit;

/// Runs `script` with bash, `srun` replaced by a function printing its arguments NUL-separated.
fn bash_srun_args(script: &str) -> Vec<String> {
    let mut child = Command::new("bash")
        .arg("-c")
        .arg("srun() { printf '%s\\0' \"$@\"; }; source /dev/stdin")
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        // Sourced from stdin there is no script file to re-run: act as the marker's child
        // (render::marker), which runs the script's own lines.
        .env("SLURM_CONNECTOR_MARKER_CHILD", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("bash");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "bash failed: {}\n{script}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let mut words: Vec<String> = text.split('\0').map(str::to_string).collect();
    words.pop(); // after the last NUL
    words
}

fn arbitrary_text() -> impl Strategy<Value = String> {
    // Anything but NUL: quotes, $, backticks, newlines, backslashes, leading dashes, unicode.
    prop_oneof![any::<String>(), "[-'\"`$\\\\ \n\t;|&<>(){}*?#!~a-z]{0,24}",]
        .prop_filter("no NUL", |s| !s.contains('\0'))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Each container arg reaches the entrypoint as exactly one argument, byte for byte.
    #[test]
    fn native_args_cannot_inject_lines_or_options(args in prop::collection::vec(arbitrary_text(), 1..5)) {
        let mut spec = task_spec(&load_request("native_pyxis_sqsh.json"));
        spec.container.as_mut().unwrap().args = args.clone();
        let r = render_at(&spec, &config(), NOW).unwrap();
        let words = bash_srun_args(&r.job.script);
        let dashdash = words.iter().position(|w| w == "--").expect("-- before the command");
        prop_assert_eq!(&words[dashdash + 1..], &args[..]);
        prop_assert!(words[..dashdash].iter().all(|w| !args.contains(w) || w.starts_with("--") || w == "bash" || w == "-c"));
    }

    /// Quoted words come back unchanged from a real shell.
    #[test]
    fn quote_round_trips_through_bash(words in prop::collection::vec(arbitrary_text(), 1..6)) {
        let script = format!("srun {}\n", words.iter().map(|w| quote(w).unwrap()).collect::<Vec<_>>().join(" "));
        prop_assert_eq!(bash_srun_args(&script), words);
    }

    /// A value in task config that contains whitespace is refused, whatever else it contains.
    #[test]
    fn config_values_with_whitespace_are_refused(a in "[a-z0-9]{0,8}", ws in "[ \t\n\r]", b in "[-a-z0-9#=]{0,8}") {
        let mut spec = Draft::of(&load_request("script_no_io.json"));
        spec.custom["sbatch_options"] = json!({ "comment": format!("{a}{ws}{b}") });
        let refused = matches!(spec.render_at(&config(), NOW), Err(RenderError::InvalidValue { .. }));
        prop_assert!(refused);
    }

    /// Unquoted values without whitespace, `#`, quotes or `\` parse back as written, in both forms.
    #[test]
    fn directive_values_round_trip(v in "[A-Za-z0-9_./:@%+=,-]{1,30}", eq in any::<bool>()) {
        let line = if eq { format!("#SBATCH --comment={v}\n") } else { format!("#SBATCH --comment {v}\n") };
        let lower = v.to_ascii_lowercase();
        if (!eq && v.starts_with(':')) || lower.contains("hetjob") || lower.contains("packjob") {
            // sbatch refuses a word starting with `:` and treats these words as hetjob separators.
            prop_assert!(parse_script(&line).is_err());
            return Ok(());
        }
        let d = parse_script(&line).unwrap();
        prop_assert_eq!(d.options.len(), 1);
        prop_assert_eq!(d.options[0].value.as_deref(), Some(v.as_str()));
    }

    /// Quoted values keep their spaces and lose their quotes.
    #[test]
    fn quoted_directive_values(v in "[A-Za-z0-9 _.-]{1,30}", dq in any::<bool>()) {
        let q = if dq { '"' } else { '\'' };
        let words = split_directive(&format!(" --comment={q}{v}{q}"), 1).unwrap();
        prop_assert_eq!(words, vec![format!("--comment={v}")]);
    }

    /// Nothing after the first executable line is a directive; comments and blanks do not end the block.
    #[test]
    fn block_ends_at_first_command(
        n in 0usize..6,
        fillers in prop::collection::vec(prop_oneof![Just(""), Just("# note"), Just("   "), Just("#!x")], 0..4),
        cmd in "[a-z]{1,8}( [a-z]{1,4})?",
        after in prop::collection::vec(Just("#SBATCH --time=9"), 0..4),
    ) {
        let mut lines = vec!["#!/bin/bash".to_string()];
        for i in 0..n {
            lines.push(format!("#SBATCH --nice={i}"));
            if let Some(f) = fillers.get(i % fillers.len().max(1)) { lines.push(f.to_string()); }
        }
        lines.push(cmd);
        lines.extend(after.iter().map(|s| s.to_string()));
        let d = parse_script(&lines.join("\n")).unwrap();
        prop_assert_eq!(d.options.len(), n);
        prop_assert!(d.options.iter().all(|o| o.spec.long == "nice"));
        let last_line = d.options.iter().map(|o| match o.origin { Origin::Script { line } => line, _ => 0 }).max().unwrap_or(0);
        prop_assert!(last_line <= d.first_command_line);
    }

    /// The parser never panics, whatever the script.
    #[test]
    fn parser_total(s in any::<String>()) {
        let _ = parse_script(&s);
    }

    /// Every sbatch time format, rounded up to minutes; 0 means no limit.
    #[test]
    fn time_formats(d in 0u64..400, h in 0u64..24, m in 0u64..60, s in 0u64..60) {
        let expect = |secs: u64| if secs == 0 { Limit::Infinite } else { Limit::Finite(secs.div_ceil(60) as u32) };
        prop_assert_eq!(parse_time_limit(&format!("{m}")).unwrap(), expect(m * 60));
        prop_assert_eq!(parse_time_limit(&format!("{m}:{s:02}")).unwrap(), expect(m * 60 + s));
        prop_assert_eq!(parse_time_limit(&format!("{h}:{m:02}:{s:02}")).unwrap(), expect(h * 3600 + m * 60 + s));
        prop_assert_eq!(parse_time_limit(&format!("{d}-{h}")).unwrap(), expect(d * 86400 + h * 3600));
        prop_assert_eq!(parse_time_limit(&format!("{d}-{h}:{m:02}")).unwrap(), expect(d * 86400 + h * 3600 + m * 60));
        prop_assert_eq!(parse_time_limit(&format!("{d}-{h:02}:{m:02}:{s:02}")).unwrap(), expect(d * 86400 + h * 3600 + m * 60 + s));
    }

    /// Garbage times are refused, never misread.
    #[test]
    fn bad_times_refused(s in "[0-9:-]{0,4}[a-zA-Z .][0-9:-]{0,4}") {
        prop_assume!(!["infinite", "unlimited"].contains(&s.to_ascii_lowercase().as_str()));
        prop_assert!(parse_time_limit(&s).is_err());
    }

    /// Sizes in every unit, in MiB, K rounded up.
    #[test]
    fn sizes(n in 0u64..5_000_000, unit in prop::sample::select(vec!["", "K", "M", "G", "T", "k", "m", "g", "t", "KB", "mb", "Gb", "TB"])) {
        let mb = match unit.to_ascii_uppercase().trim_end_matches('B') {
            "" | "M" => n,
            "K" => n.div_ceil(1024),
            "G" => n * 1024,
            "T" => n * 1024 * 1024,
            _ => unreachable!(),
        };
        prop_assert_eq!(parse_mbytes(&format!("{n}{unit}")).unwrap(), mb);
    }

    /// Anything that is not digits plus a unit is refused.
    #[test]
    fn bad_sizes_refused(s in "[0-9]{0,3}[^0-9KMGTkmgt][0-9A-Za-z]{0,2}") {
        prop_assert!(parse_mbytes(&s).is_err());
    }
}
