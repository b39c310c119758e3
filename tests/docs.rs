//! The committed man pages and completions must match what the clap definitions generate now.
//! `scripts/gen-docs` rewrites them.

use crate::util::repo;

#[test]
fn man_pages_and_completions_do_not_drift() {
    // Under CI the variable would turn the drift check into a rewrite that always passes.
    assert!(
        std::env::var_os("ACCEL_UPDATE_DOCS").is_none() || std::env::var_os("CI").is_none(),
        "ACCEL_UPDATE_DOCS is set under CI: the drift test would rewrite the docs instead of checking them"
    );
    let mut drifted = Vec::new();
    for (rel, contents) in accel::docs::render_all() {
        let path = repo().join(&rel);
        if std::env::var_os("ACCEL_UPDATE_DOCS").is_some() {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &contents).unwrap();
            continue;
        }
        match std::fs::read(&path) {
            Ok(on_disk) if on_disk == contents => {}
            _ => drifted.push(rel),
        }
    }
    assert!(
        drifted.is_empty(),
        "generated docs differ from the committed ones (run scripts/gen-docs): {drifted:?}"
    );
}

#[test]
fn every_man_page_has_the_hand_sections() {
    for tool in accel::cli::tools() {
        let page = String::from_utf8(accel::docs::man_page(&tool)).unwrap();
        for section in ["EXIT STATUS", "ENVIRONMENT", "SEE ALSO"] {
            assert!(
                page.contains(&format!(".SH \"{section}\""))
                    || page.contains(&format!(".SH {section}")),
                "{} lacks {section}",
                tool.name
            );
        }
    }
}

#[test]
fn every_name_line_is_the_tools_own_one_liner() {
    let blurb = env!("CARGO_PKG_DESCRIPTION").replace('-', "\\-");
    for tool in accel::cli::tools() {
        let page = String::from_utf8(accel::docs::man_page(&tool)).unwrap();
        let name = page
            .lines()
            .skip_while(|l| *l != ".SH NAME")
            .nth(1)
            .unwrap_or_default()
            .to_string();
        let expected = accel::docs::one_liner(&(tool.command)()).unwrap();
        assert_eq!(
            name,
            format!(
                "{} \\- {}",
                tool.name.replace('-', "\\-"),
                expected.replace('-', "\\-")
            ),
            "{}",
            tool.name
        );
        assert!(
            !name.contains(&blurb),
            "{}: NAME is the package blurb",
            tool.name
        );
    }
}

/// A man page names only flags that exist: every `--flag` in its text is a flag (or alias) of one of the
/// tools, or one of the other programs' flags the pages discuss by name.
#[test]
fn man_pages_name_only_existing_flags() {
    let mut known: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
    for tool in accel::cli::tools() {
        let mut stack = vec![(tool.command)()];
        while let Some(cmd) = stack.pop() {
            for arg in cmd.get_arguments() {
                known.extend(arg.get_long().map(str::to_string));
                known.extend(
                    arg.get_all_aliases()
                        .unwrap_or_default()
                        .into_iter()
                        .map(str::to_string),
                );
            }
            stack.extend(cmd.get_subcommands().cloned());
        }
    }
    known.extend(["help", "version"].map(String::from));
    // Other programs' flags the pages discuss: DeepSpeed's launcher, srun and sbatch, docker, a user
    // script's (examples/train.py), the estimate benchmark's (scripts/bench/estimate-vs-measured
    // --grid). torchrun's flags are accel-launch's own now, and checked as such.
    let others = [
        "include",
        "exclude",
        "gpus-per-task",
        "ntasks-per-node",
        "cap-add",
        "lr",
        "checkpoint_dir",
        "signal",
        "requeue",
        "no-requeue",
        "kill-on-bad-exit",
        "no-kill",
        "grid",
        // the control plane's benchmark (scripts/bench/control --simulate).
        "simulate",
        // numactl's (torch's NUMA binding).
        "physcpubind",
        // py-spy's (the hang watch's native look: `py-spy record --native`, which refuses
        // --nonblocking).
        "native",
        "nonblocking",
    ];
    // An entry that is a tool's own flag would let that flag vanish from the tool unnoticed.
    let own: Vec<&str> = others
        .iter()
        .copied()
        .filter(|f| known.contains(*f))
        .collect();
    assert!(
        own.is_empty(),
        "flags listed as other programs' that are a tool's own: {own:?}"
    );
    known.extend(others.map(String::from));
    let mut unknown = Vec::new();
    for tool in accel::cli::tools() {
        let page = String::from_utf8(accel::docs::man_page(&tool))
            .unwrap()
            .replace("\\-", "-");
        for (i, _) in page.match_indices("--") {
            let flag: String = page[i + 2..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
                .collect();
            if !flag.is_empty() && !known.contains(&flag) {
                unknown.push(format!("{}: --{flag}", tool.name));
            }
        }
    }
    unknown.sort();
    unknown.dedup();
    assert!(unknown.is_empty(), "flags no tool has: {unknown:#?}");
}

/// `TOOL -h` opens with the tool's own one-liner (its NAME line), not the package's sentence.
#[test]
fn every_tools_short_help_opens_with_its_own_one_liner() {
    let blurb = env!("CARGO_PKG_DESCRIPTION");
    let d = crate::util::tempdir();
    for tool in accel::cli::tools() {
        let o = crate::util::Run::new(tool.name, d.path())
            .args(["-h"])
            .run();
        let first = o
            .stdout
            .lines()
            .next()
            .unwrap_or_default()
            .trim()
            .to_string();
        let expected = accel::docs::one_liner(&(tool.command)()).unwrap();
        assert_eq!(first, expected, "{} -h", tool.name);
        assert!(
            !o.stdout.contains(blurb),
            "{} -h shows the package sentence",
            tool.name
        );
    }
}
