//! Where accelerate keeps its config, computed exactly as `accelerate.commands.config.config_args` does.

use std::path::PathBuf;

use crate::env_vars::{self, Environment};

fn expand_user(path: &str, env: &Environment) -> PathBuf {
    match (path.strip_prefix('~'), env.non_empty(env_vars::HOME)) {
        (Some(rest), Some(home)) if rest.is_empty() || rest.starts_with('/') => {
            PathBuf::from(format!("{home}{rest}"))
        }
        _ => PathBuf::from(path),
    }
}

/// `$HF_HOME`, or `${XDG_CACHE_HOME:-~/.cache}/huggingface`.
pub fn hf_cache_dir(env: &Environment) -> PathBuf {
    match env.non_empty(env_vars::HF_HOME) {
        Some(home) => expand_user(home, env),
        None => {
            let cache = env
                .non_empty(env_vars::XDG_CACHE_HOME)
                .unwrap_or("~/.cache");
            expand_user(&format!("{cache}/huggingface"), env)
        }
    }
}

/// `<hf cache>/accelerate/default_config.yaml`.
pub fn default_config_path(env: &Environment) -> PathBuf {
    hf_cache_dir(env)
        .join("accelerate")
        .join("default_config.yaml")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn like_accelerate() {
        let env = Environment::from_pairs([("HOME", "/home/u")]);
        assert_eq!(
            default_config_path(&env),
            PathBuf::from("/home/u/.cache/huggingface/accelerate/default_config.yaml")
        );
        let env = Environment::from_pairs([("HOME", "/home/u"), ("XDG_CACHE_HOME", "/x")]);
        assert_eq!(
            default_config_path(&env),
            PathBuf::from("/x/huggingface/accelerate/default_config.yaml")
        );
        let env = Environment::from_pairs([
            ("HOME", "/home/u"),
            ("XDG_CACHE_HOME", "/x"),
            ("HF_HOME", "~/hf"),
        ]);
        assert_eq!(
            default_config_path(&env),
            PathBuf::from("/home/u/hf/accelerate/default_config.yaml")
        );
    }
}
