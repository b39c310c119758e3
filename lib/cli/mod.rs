//! The clap definitions of all six tools. They live in the library so the binaries, the man-page and
//! completion generator, and the tests use the very same types. Doc comments here are the user
//! documentation: first line is the short help, the rest the long help and man text.
//!
//! Every `--foo_bar` flag also answers to `--foo-bar`, as accelerate's parsers do.

pub mod config;
pub mod env;
pub mod estimate;
pub mod launch;
pub mod merge;
pub mod test;
pub mod torchrun;

use clap::CommandFactory;

/// One tool: its name and clap command, plus what the man page adds beyond the flags.
pub struct ToolDoc {
    pub name: &'static str,
    pub command: fn() -> clap::Command,
    pub env_groups: &'static [crate::env_vars::Group],
    /// `(command line, what it does)` pairs for EXAMPLES.
    pub examples: &'static [(&'static str, &'static str)],
    /// Which exit statuses beyond 0–4 and the signals its man page lists.
    pub codes: crate::exit_status::Codes,
    /// Extra man sections: `(TITLE, paragraphs)`.
    pub extra_sections: &'static [(&'static str, &'static [&'static str])],
}

/// All six tools, in the order of the README.
pub fn tools() -> Vec<ToolDoc> {
    vec![
        config::doc(),
        env::doc(),
        launch::doc(),
        test::doc(),
        estimate::doc(),
        merge::doc(),
    ]
}

pub(crate) fn command_of<T: CommandFactory>() -> clap::Command {
    with_value_hints(T::command())
}

/// What shell completion offers for each option's value, where the option does not say: file names
/// for a value named PATH or FILE, directories for DIR, nothing for any other (clap_complete's bash
/// script offers file names for an option without a hint or possible values: `--mixed_precision`
/// and `--tee` offered the directory's files).
pub fn with_value_hints(cmd: clap::Command) -> clap::Command {
    cmd.mut_args(|a| {
        let takes_value =
            a.get_num_args().is_some_and(|n| n.takes_values()) || a.get_action().takes_values();
        if !takes_value
            || a.is_positional()
            || !a.get_possible_values().is_empty()
            || a.get_value_hint() != clap::ValueHint::Unknown
        {
            return a;
        }
        let hint = match a
            .get_value_names()
            .and_then(|n| n.first())
            .map(|n| n.as_str())
        {
            Some("PATH" | "FILE") => clap::ValueHint::FilePath,
            Some("DIR") => clap::ValueHint::DirPath,
            _ => clap::ValueHint::Other,
        };
        a.value_hint(hint)
    })
    .mut_subcommands(with_value_hints)
}

/// A string option whose known values shell completion offers, while any string is accepted here
/// and checked where the value is used (a config value's check names the key and the file or flag it
/// came from; clap's would not).
#[derive(Clone, Debug)]
pub(crate) struct Candidates(pub(crate) Vec<&'static str>);

impl clap::builder::TypedValueParser for Candidates {
    type Value = String;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<String, clap::Error> {
        clap::builder::StringValueParser::new().parse_ref(cmd, arg, value)
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        Some(Box::new(
            self.0.iter().map(|v| clap::builder::PossibleValue::new(*v)),
        ))
    }
}

/// Other launchers' names for options accel-launch spells accelerate's way: (their name, whose, ours).
pub const OTHER_LAUNCHERS_OPTIONS: &[(&str, &str, &str)] = &[
    ("master_port", "torchrun", "main_process_port"),
    ("master_addr", "torchrun", "main_process_ip"),
    ("nnodes", "torchrun", "num_machines"),
    ("node_rank", "torchrun", "machine_rank"),
    ("num_gpus", "deepspeed", "num_processes"),
    ("num_nodes", "deepspeed", "num_machines"),
];

/// The hint for an option `cmd` does not know (`--num_proceses`, `--master-port=29500`): the option
/// another launcher's name means, else the closest by spelling; `None` when nothing is close.
pub fn suggest_option(
    given: &str,
    cmd: &clap::Command,
    others: &[(&str, &str, &str)],
) -> Option<String> {
    let name = given
        .trim_start_matches('-')
        .split('=')
        .next()
        .unwrap_or_default()
        .replace('-', "_");
    let mut known: Vec<String> = Vec::new();
    for a in cmd.get_arguments() {
        let names = a
            .get_long()
            .into_iter()
            .chain(a.get_all_aliases().unwrap_or_default());
        for n in names {
            let n = n.replace('-', "_");
            if !known.contains(&n) {
                known.push(n);
            }
        }
    }
    if let Some((_, whose, ours)) = others
        .iter()
        .find(|(theirs, _, ours)| *theirs == name && known.iter().any(|k| k == ours))
    {
        return Some(format!(
            "`--{name}` is {whose}'s name: here it is `--{ours}`"
        ));
    }
    crate::config::schema::closest(&name, known.iter().map(String::as_str))
        .map(|c| format!("did you mean `--{c}`?"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 24 item 11: an unknown option gets the option meant.
    #[test]
    fn unknown_options_get_the_option_meant() {
        let cmd = clap::Command::new("t")
            .arg(
                clap::Arg::new("num_processes")
                    .long("num_processes")
                    .visible_alias("num-processes"),
            )
            .arg(clap::Arg::new("main_process_port").long("main_process_port"));
        let s = |g: &str| suggest_option(g, &cmd, OTHER_LAUNCHERS_OPTIONS);
        assert_eq!(
            s("--num_proceses").as_deref(),
            Some("did you mean `--num_processes`?")
        );
        assert_eq!(
            s("--num-proceses=4").as_deref(),
            Some("did you mean `--num_processes`?")
        );
        assert_eq!(
            s("--master_port").as_deref(),
            Some("`--master_port` is torchrun's name: here it is `--main_process_port`")
        );
        assert_eq!(
            s("--master-port=29500").as_deref(),
            Some("`--master_port` is torchrun's name: here it is `--main_process_port`")
        );
        assert_eq!(s("--zzz"), None);
        // A name whose meaning this command lacks is matched by spelling only.
        assert_eq!(s("--nnodes"), None);
    }
}
