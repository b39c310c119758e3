//! Man pages and shell completions, generated from the clap types in [`crate::cli`] plus what clap cannot
//! know: ENVIRONMENT (from the [`crate::env_vars`] registry), EXIT STATUS (from [`ExitStatus`]), EXAMPLES
//! and tool-specific sections. The outputs are committed under `man/`; the test suite regenerates them
//! in memory and fails when they drift (`scripts/gen-docs` rewrites them).

use clap_complete::Shell;
use roff::{bold, roman, Roff};

use crate::cli::{tools, ToolDoc};
use crate::env_vars;
use crate::exit_status::ExitStatus;

/// Every generated file: `(path relative to the repository root, contents)`.
pub fn render_all() -> Vec<(String, Vec<u8>)> {
    let mut files = Vec::new();
    for tool in tools() {
        files.push((format!("man/{}.1", tool.name), man_page(&tool)));
        for (shell, ext) in [
            (Shell::Bash, "bash"),
            (Shell::Zsh, "zsh"),
            (Shell::Fish, "fish"),
        ] {
            let mut cmd = (tool.command)();
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut cmd, tool.name, &mut out);
            files.push((format!("man/completions/{}.{ext}", tool.name), out));
        }
    }
    files
}

fn section(roff: &mut Roff, title: &str) {
    roff.control("SH", [title]);
}

/// The man page of one tool.
pub fn man_page(tool: &ToolDoc) -> Vec<u8> {
    let cmd = (tool.command)();
    // NAME is clap's `about`, which the tools' `#[command(about)]` fills with the package description;
    // a man page's NAME line is the tool's own one-liner: the first line of its long help.
    let cmd = match one_liner(&cmd) {
        Some(line) => cmd.about(line),
        None => cmd,
    };
    let man = clap_mangen::Man::new(cmd.clone())
        .section("1")
        .manual("accel manual")
        .source(format!("accel {}", env!("CARGO_PKG_VERSION")));
    let mut out = Vec::new();
    // Writing to a Vec cannot fail.
    let _ = man.render_title(&mut out);
    let _ = man.render_name_section(&mut out);
    let _ = man.render_synopsis_section(&mut out);
    let _ = man.render_description_section(&mut out);
    let _ = man.render_options_section(&mut out);
    if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
        let _ = man.render_subcommands_section(&mut out);
    }

    let mut roff = Roff::new();
    for (title, paragraphs) in tool.extra_sections {
        section(&mut roff, title);
        for p in *paragraphs {
            roff.control("PP", []).text([roman(*p)]);
        }
    }

    let vars = env_vars::documented(tool.env_groups);
    if !vars.is_empty() {
        section(&mut roff, "ENVIRONMENT");
        for var in vars {
            roff.control("TP", [])
                .text([bold(var.name)])
                .text([roman(var.doc)]);
        }
    }

    section(&mut roff, "EXIT STATUS");
    for (code, meaning) in ExitStatus::documented(tool.codes) {
        roff.control("TP", [])
            .text([bold(code)])
            .text([roman(meaning)]);
    }

    if !tool.examples.is_empty() {
        section(&mut roff, "EXAMPLES");
        for (command, what) in tool.examples {
            roff.control("TP", [])
                .text([bold(*command)])
                .text([roman(*what)]);
        }
    }

    section(&mut roff, "SEE ALSO");
    let others: Vec<String> = tools()
        .iter()
        .filter(|t| t.name != tool.name)
        .map(|t| format!("{}(1)", t.name))
        .collect();
    roff.text([roman(others.join(", "))]);
    out.extend(roff.to_roff().into_bytes());
    out
}

/// The first sentence of a command's long help, without its full stop: `accel-config - Write, read and
/// check accelerate config files (YAML, JSON or TOML)`.
pub fn one_liner(cmd: &clap::Command) -> Option<String> {
    let long = cmd.get_long_about()?.to_string();
    let first = long.lines().next()?.trim().trim_end_matches('.');
    (!first.is_empty()).then(|| first.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 24 item 11: shell completion offers file names only where a path goes. clap_complete's
    /// bash script offers file names for a value without possible values or a value hint
    /// (`--mixed_precision` and `--tee` did).
    #[test]
    fn completion_offers_file_names_only_for_paths() {
        let mut wrong = Vec::new();
        for tool in tools() {
            let mut cmds = vec![(tool.command)()];
            while let Some(mut c) = cmds.pop() {
                c.build();
                for a in c.get_arguments() {
                    let takes_value = a.get_num_args().is_some_and(|n| n.takes_values());
                    if !takes_value || a.is_positional() || !a.get_possible_values().is_empty() {
                        continue;
                    }
                    use clap::ValueHint::*;
                    let files = !matches!(a.get_value_hint(), Other | DirPath);
                    let path = matches!(
                        a.get_value_hint(),
                        FilePath | AnyPath | ExecutablePath | DirPath
                    );
                    if files && !path {
                        wrong.push(format!(
                            "{} {} --{} ({:?})",
                            tool.name,
                            c.get_name(),
                            a.get_long().unwrap_or_default(),
                            a.get_value_hint()
                        ));
                    }
                }
                cmds.extend(c.get_subcommands().cloned());
            }
        }
        assert!(
            wrong.is_empty(),
            "{} options complete file names but take no path:\n{}",
            wrong.len(),
            wrong.join("\n")
        );
        // The bash script itself: the values of --mixed_precision, nothing for --tee.
        let bash = render_all()
            .into_iter()
            .find(|(p, _)| p == "man/completions/accel-launch.bash")
            .map(|(_, b)| String::from_utf8(b).unwrap_or_default())
            .unwrap_or_default();
        // The lines of an option's case up to its `return`.
        let case = |opt: &str| {
            let start = bash.find(&format!("                {opt})")).unwrap_or(0);
            let rest = &bash[start..];
            rest[..rest.find("return 0").unwrap_or(rest.len())].to_string()
        };
        assert!(case("--mixed_precision")
            .contains(r#"COMPREPLY=($(compgen -W "no fp16 bf16 fp8" -- "${cur}"))"#));
        assert!(case("--tee").contains(r#"COMPREPLY=("${cur}")"#));
        for opt in [
            "--mixed_precision",
            "--tee",
            "--num_processes",
            "--hang_timeout",
        ] {
            assert!(!case(opt).contains("compgen -f"), "{opt}: {}", case(opt));
        }
        for opt in ["--config_file", "--log_dir", "--deepspeed_config_file"] {
            assert!(case(opt).contains("compgen -"), "{opt}: {}", case(opt));
        }
    }
}
