//! `accel-config`: write, read, change and check accelerate config files.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use super::ToolDoc;
use crate::env_vars::Group;

/// Write, read and check accelerate config files (YAML, JSON or TOML).
///
/// With no subcommand on a terminal, asks the same questions as `accelerate config` and writes the
/// answers to the default config path (or --config_file). Without a terminal it refuses instead of
/// waiting for input: use `default`, `set` and friends in scripts.
///
/// The default config path is accelerate's: $HF_HOME/accelerate/default_config.yaml, or
/// ${XDG_CACHE_HOME:-~/.cache}/huggingface/accelerate/default_config.yaml. The format follows the
/// extension: .json is JSON, .toml is TOML, anything else YAML (which also reads JSON).
#[derive(Debug, Parser)]
#[command(name = "accel-config", version, max_term_width = 100)]
pub struct ConfigCli {
    #[command(subcommand)]
    pub command: Option<ConfigCommand>,

    /// Config file to read or write (default: accelerate's default config path).
    #[arg(long = "config_file", visible_alias = "config-file", global = true, value_name = "PATH", value_hint = clap::ValueHint::FilePath)]
    pub config_file: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Write a config for this machine without asking: all detected GPUs, or one CPU process.
    ///
    /// Like `accelerate config default`, but YAML (accelerate writes JSON into the .yaml file), and an
    /// existing file is kept unless --force is given — with an error saying so, not a silent exit 0.
    Default(DefaultArgs),
    /// Rewrite a config file with legacy and removed keys migrated, warning about each change.
    ///
    /// Only the lines of changed keys are rewritten: comments, key order and the formatting of every
    /// other line are kept in YAML and TOML files, and key order in JSON. A file in a layout that cannot
    /// be edited line by line (YAML flow style, anchors) is rewritten whole, with a warning.
    Update,
    /// Print the resolved config (file, ACCEL_CONFIG_* environment and defaults).
    ///
    /// The output is YAML that accelerate loads with the same values (`show > x.yaml`); with --origin
    /// each value's origin follows it as a comment.
    Show(ShowArgs),
    /// Print one resolved value, bare, for scripts: `$(accel-config get num_processes)`.
    Get(GetArgs),
    /// Set one key in the config file (created if missing), validating the value first.
    ///
    /// Only the key's own line changes (as `update`): comments, key order and formatting are kept.
    /// A section takes a mapping: `set fsdp_config '{fsdp_version: 2}'`.
    Set(SetArgs),
    /// Check that accel and accelerate both load a config file with the same values.
    ///
    /// Exit 0 when valid; 1 with every problem listed as file:line otherwise: values accel refuses, and
    /// what accelerate refuses or misreads (unknown keys, TOML, YAML 1.1 words such as an unquoted
    /// `No`, inexact enum spellings). --accel_only checks only what accel reads. A missing file is 2.
    Validate(ValidateArgs),
    /// Convert an FSDP1 config to FSDP2, key for key as `accelerate to-fsdp2` does.
    ///
    /// `fsdp_sharding_strategy` becomes `fsdp_reshard_after_forward` (FULL_SHARD and HYBRID_SHARD: true,
    /// the others false); the FSDP1-only keys (fsdp_backward_prefetch, fsdp_forward_prefetch,
    /// fsdp_sync_module_states, fsdp_use_orig_params) are dropped with a warning each; every other key is
    /// kept; fsdp_version becomes 2. Comments and key order are kept as `set` keeps them, and the renamed
    /// key keeps its line. Needs --config_file, and --output_file or --overwrite.
    #[command(name = "to-fsdp2", visible_alias = "to_fsdp2")]
    ToFsdp2(ToFsdp2Args),
}

#[derive(Debug, Args)]
pub struct DefaultArgs {
    /// Mixed precision to write.
    #[arg(
        long = "mixed_precision",
        visible_alias = "mixed-precision",
        value_parser = clap::builder::PossibleValuesParser::new(crate::config::schema::MIXED_PRECISION),
        default_value = "no"
    )]
    pub mixed_precision: String,
    /// Overwrite an existing config file.
    #[arg(long, short = 'f')]
    pub force: bool,
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// Show where each value comes from: a flag, an environment variable, file:line, or default.
    #[arg(long)]
    pub origin: bool,
    /// Print JSON (`{"key": {"value": …, "origin": …}}` with --origin).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct GetArgs {
    /// Key to print; sections as `fsdp_config.fsdp_version`.
    #[arg(value_name = "KEY")]
    pub key: String,
    /// Print the value as JSON (lists and sections always are).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct SetArgs {
    /// Key to set; sections as `fsdp_config.fsdp_version`.
    #[arg(value_name = "KEY")]
    pub key: String,
    /// New value, read as YAML would read it (`true`, `8`, `bf16`, `[a, b]`).
    #[arg(value_name = "VALUE", allow_hyphen_values = true)]
    pub value: String,
}

#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// File to check (default: --config_file, ACCEL_CONFIG_FILE or the default path).
    #[arg(value_name = "FILE", value_hint = clap::ValueHint::FilePath)]
    pub file: Option<PathBuf>,
    /// Check only that accel loads the file, not that accelerate would load it the same way.
    #[arg(long = "accel_only", visible_alias = "accel-only")]
    pub accel_only: bool,
}

#[derive(Debug, Args)]
pub struct ToFsdp2Args {
    /// Write the converted config here (refused when it exists, unless --overwrite).
    #[arg(long = "output_file", visible_alias = "output-file", value_name = "PATH", value_hint = clap::ValueHint::FilePath)]
    pub output_file: Option<PathBuf>,
    /// Overwrite the output file, or without --output_file the config file itself.
    #[arg(long = "overwrite")]
    pub overwrite: bool,
}

pub fn doc() -> ToolDoc {
    ToolDoc {
        name: "accel-config",
        command: super::command_of::<ConfigCli>,
        env_groups: &[Group::Accel, Group::Paths, Group::Output],
        examples: &[
            ("accel-config", "Answer the questionnaire on a terminal and write the default config."),
            ("accel-config default --mixed_precision bf16", "Write a config for this machine's GPUs."),
            ("accel-config show --origin", "Print every resolved value and where it came from."),
            ("accel-config get num_processes", "Print one value, for $(…) in scripts."),
            ("accel-config set fsdp_config.fsdp_version 2", "Change one key, validated, in place."),
            ("accel-config validate cluster.yaml", "Check a file; every problem is listed with file:line."),
            ("accel-config to-fsdp2 --config_file fsdp.yaml --overwrite", "Convert an FSDP1 config to FSDP2 in place, comments kept."),
        ],
        codes: crate::exit_status::Codes::Plain,
        extra_sections: &[(
            "EDITING FILES",
            &[
                "`set` and `update` rewrite only the lines of the keys they change. In YAML and TOML files the comments, the key order, blank lines and the formatting of every other line are kept byte for byte (a changed value keeps its trailing comment); JSON keeps its key order (it has no comments). New keys are appended at the end of the file or of their section. A YAML file in a layout that cannot be edited line by line (flow style, anchors, several documents) is rewritten whole in accel's layout, with a warning. YAML merge keys (`<<: *anchor`) read as accelerate (PyYAML) reads them; a section holding one that changes is rewritten whole with the merged values expanded, with a warning. `update` warns about every change it makes, with the key's file:line.",
                "`validate` checks what accel reads and, unless --accel_only is given, that accelerate 1.15 would load the file with the same values: it refuses unknown top-level keys, TOML files (accelerate reads only YAML and JSON), plain YAML 1.1 words that PyYAML reads as booleans or numbers differently (`mixed_precision: No` is False there), and enum values not spelled exactly (`multi_gpu`). Exit 0 when valid, 1 with every problem listed, 2 when the file is missing.",
                "`show` prints YAML that accelerate loads with the same values; --origin adds each value's origin as a comment.",
                "`to-fsdp2` converts as accelerate 1.15's `accelerate to-fsdp2` does (the values of the file it writes are the same) and edits like `set`: comments and order are kept, and `fsdp_reshard_after_forward` takes the line of the `fsdp_sharding_strategy` it replaces. A config without `fsdp_config` (or with an empty one) and one already at `fsdp_version: 2` are not converted: a warning says so, and --output_file gets an unchanged copy. Without --overwrite an existing output file is refused (exit 4, nothing written).",
            ],
        ), (
            "DIFFERENCES FROM ACCELERATE",
            &[
                "Unknown keys are warnings that name the closest valid key; accelerate refuses the file (and so does `validate`, unless --accel_only). Keys inside sections (fsdp_config, …) are validated too; accelerate never checks them.",
                "An unquoted `mixed_precision: no` reads as the string no (YAML 1.2); accelerate reads False and crashes at launch. Strings YAML 1.1 would read as booleans are always written quoted, so PyYAML reads accel's files right.",
                "`default` writes YAML and refuses to overwrite without --force, saying so; accelerate writes JSON into default_config.yaml and exits 0 silently.",
                "Config values are resolved command line > ACCEL_CONFIG_* environment > file > defaults, and the keys accelerate ignores (rdzv_backend, same_network, enable_cpu_affinity, downcast_bf16, tpu_use_sudo) are honoured.",
                "Amazon SageMaker configs are recognised and rejected with a clear message.",
                "`to-fsdp2` keeps the file's comments, key order and format (accelerate rewrites it with yaml.dump: keys sorted, comments lost, YAML even in a .json file); an --output_file with another extension is written in that file's format.",
            ],
        )],
    }
}
