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
    T::command()
}
